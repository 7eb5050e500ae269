// Talking to Tether: the control API's envelope, runs on /v1/responses, SSE streams read
// with fetch (EventSource cannot send a credential), and the credential itself, kept in
// sessionStorage and sent only as an Authorization header, never in a URL.

const CONTROL = '/agentengine/api/v1/';
const CREDENTIAL_KEY = 'tether.credential';

/** A refusal in the control API's envelope (or another JSON error body). */
export class ApiError extends Error {
  constructor(message, status, code, data) {
    super(message);
    this.status = status;
    this.code = code;
    this.data = data;
  }
}

export const credential = {
  get: () => sessionStorage.getItem(CREDENTIAL_KEY),
  set: (value) => sessionStorage.setItem(CREDENTIAL_KEY, value),
  clear: () => sessionStorage.removeItem(CREDENTIAL_KEY),
};

// Asked for a credential when a request is refused with 401; resolves once the person
// has given one. Set by the app.
let askCredential = async () => {
  throw new ApiError('authentication required', 401);
};
export function onCredentialNeeded(ask) {
  askCredential = ask;
}

function withCredential(headers = {}) {
  const value = credential.get();
  return value ? { ...headers, Authorization: `Bearer ${value}` } : headers;
}

/**
 * fetch with the credential. A refusal of the credential (a challenge in
 * `WWW-Authenticate`: 401, or 400 for a malformed one) asks for a credential, with the
 * server's reason, and tries again with it.
 */
async function authorized(url, init = {}) {
  for (;;) {
    const response = await fetch(url, { ...init, headers: withCredential(init.headers) });
    if (!response.headers.has('www-authenticate')) return response;
    const reason = await errorOf(response);
    await askCredential(credential.get() ? reason.message : null);
  }
}

/** The error a non-success response carries: envelope, OpenAI error, or status text. */
async function errorOf(response) {
  let body = null;
  try {
    body = await response.json();
  } catch {
    return new ApiError(`HTTP ${response.status}`, response.status);
  }
  if (body && 'Code' in body) {
    return new ApiError(body.Message, response.status, body.Data?.code, body.Data);
  }
  const e = body?.error || {};
  return new ApiError(e.message || `HTTP ${response.status}`, response.status, e.code, e);
}

/** A control action: resolves to the envelope's `Data`, rejects with an ApiError. */
export async function call(action, body = {}) {
  const response = await authorized(CONTROL + action, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  if (!response.ok) throw await errorOf(response);
  const envelope = await response.json();
  return envelope.Data;
}

/** POSTs to `path` expecting SSE; resolves to the response once its headers arrived. */
export async function startStream(path, body) {
  const response = await authorized(path, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'text/event-stream' },
    body: JSON.stringify(body),
  });
  if (!response.ok) throw await errorOf(response);
  return response;
}

/**
 * Reads a response body to its end without looking at it. A run belongs to the gateway,
 * not to this connection: the console shows it from the session's log, and reading the
 * original stream out only keeps the connection tidy.
 */
export async function drain(response) {
  const reader = response.body?.getReader();
  if (!reader) return;
  try {
    while (!(await reader.read()).done) {
      // nothing to do
    }
  } catch {
    // The connection ended early; the run goes on regardless.
  }
}

/** Yields each SSE frame of a response as {id, event, data}. */
export async function* frames(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value.replace(/\r\n?/g, '\n');
    let end;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const frame = { id: null, event: null, data: [] };
      for (const line of block.split('\n')) {
        const colon = line.indexOf(':');
        if (colon === 0) continue; // a comment
        const field = colon < 0 ? line : line.slice(0, colon);
        const v = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
        if (field === 'data') frame.data.push(v);
        else if (field === 'id') frame.id = v;
        else if (field === 'event') frame.event = v;
      }
      if (frame.data.length) yield { ...frame, data: frame.data.join('\n') };
    }
  }
}

/**
 * Follows a session's committed events after the position `after` (SubscribeRunEvents;
 * the seq, except in a fork): resolves to the open response, whose frames are events as
 * ListSessionEvents shows them, each with its position as its id.
 */
export async function subscribe(sessionId, after, signal) {
  const query = new URLSearchParams({ SessionId: sessionId, AfterSeqId: String(after) });
  const response = await authorized(`${CONTROL}SubscribeRunEvents?${query}`, {
    headers: { accept: 'text/event-stream' },
    signal,
  });
  if (!response.ok) throw await errorOf(response);
  return response;
}

/** An attachment or workspace file, fetched with the credential: {blob, type, name}. */
export async function fileContent(fileUri) {
  const query = new URLSearchParams({ FileUri: fileUri });
  const response = await authorized(`${CONTROL}AttachmentContent?${query}`);
  if (!response.ok) throw await errorOf(response);
  const type = response.headers.get('content-type') || 'application/octet-stream';
  const disposition = response.headers.get('content-disposition') || '';
  const name = /filename="([^"]*)"/.exec(disposition)?.[1] || fileUri.split('/').pop();
  return { blob: await response.blob(), type, name, inline: !disposition.startsWith('attachment') };
}

/** Reads a File as a data: URL (what UploadAttachment takes). */
export function dataUrl(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(reader.result);
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(file);
  });
}
