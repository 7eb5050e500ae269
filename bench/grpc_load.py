#!/usr/bin/env python3
"""bench/grpc_load.py — load for the A2A-over-gRPC rows of bench/run.sh: CONNS callers on one
HTTP/2 connection (grpcio's channel multiplexes them), each sending `lf.a2a.v1.A2AService`
SendMessage (unary) or SendStreamingMessage (stream) back to back for SECONDS, every message
a new conversation. Prints one JSON object: messages completed and failed, messages/s,
latency p50/p99 (send → answer, or → last stream event) and stream events received.

    python bench/grpc_load.py --target 127.0.0.1:PORT --mode unary|stream --conns 16 \
        --seconds 5 [--key API_KEY] [--text bench:5:0]

Needs a2a-sdk with grpcio (tests/interop/requirements.txt).
"""

import argparse
import asyncio
import json
import time
import uuid

import grpc
from a2a.types import a2a_pb2_grpc
from a2a.types.a2a_pb2 import Message, Part, Role, SendMessageRequest


async def main(args) -> dict:
    metadata = [("authorization", f"Bearer {args.key}")] if args.key else None
    latencies, failures, events = [], [], 0
    deadline = time.monotonic() + args.seconds

    async with grpc.aio.insecure_channel(args.target) as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)

        async def one() -> None:
            nonlocal events
            message = Message(role=Role.ROLE_USER, message_id=str(uuid.uuid4()), parts=[Part(text=args.text)])
            request = SendMessageRequest(message=message)
            started = time.perf_counter()
            try:
                if args.mode == "unary":
                    await stub.SendMessage(request, metadata=metadata, timeout=60)
                else:
                    async for _ in stub.SendStreamingMessage(request, metadata=metadata, timeout=60):
                        events += 1
            except grpc.aio.AioRpcError as e:
                failures.append(e.code().name)
                return
            latencies.append(time.perf_counter() - started)

        async def caller() -> None:
            while time.monotonic() < deadline:
                await one()

        started = time.monotonic()
        await asyncio.gather(*(caller() for _ in range(args.conns)))
        elapsed = time.monotonic() - started

    latencies.sort()
    pct = lambda p: int(latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1e6) if latencies else None
    return {
        "msgs": len(latencies),
        "failed": len(failures),
        "errors": sorted(set(failures)),
        "msgs_per_s": round(len(latencies) / elapsed, 1),
        "lat_p50_us": pct(0.50),
        "lat_p99_us": pct(0.99),
        "events": events,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", required=True)
    parser.add_argument("--mode", choices=["unary", "stream"], required=True)
    parser.add_argument("--conns", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--key")
    parser.add_argument("--text", default="bench:5:0")
    print(json.dumps(asyncio.run(main(parser.parse_args()))))
