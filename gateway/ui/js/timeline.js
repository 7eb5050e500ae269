// A session's timeline: every event of the log in seq order, each once (an event of this
// session at or below the last seq shown is ignored, so a replay that overlaps what is on
// screen adds nothing; a fork's inherited events, which keep their parent's seqs, are
// counted apart). Transcript events show as the conversation; control events as lifecycle
// rows, or folded away until "Show control events" is on. Streamed deltas build a live
// answer that the run's final message replaces.

import { h, icon, clock, pretty, badge } from './dom.js';

export const TERMINAL = new Set(['completed', 'failed', 'cancelled', 'interrupted']);

/** Events that only the control view shows. */
const QUIET = new Set(['text_delta', 'reasoning_delta', 'tool_receipt', 'http_sse_event']);

/** Kinds shown on one line. */
const COMPACT = new Set(['status', 'checkpoint', 'divider', 'http', 'agent']);

const short = (id) => (id && id.length > 14 ? `${id.slice(0, 9)}…${id.slice(-4)}` : id || '');

/** Flags a history-aware log may set on an event (a fork's inherited events, a resumed
 * branch's superseded ones); either spelling. */
function flags(e) {
  const on = (name) => Boolean(e[name] ?? e[name.toLowerCase()] ?? e.Metadata?.[name.toLowerCase()]);
  return { superseded: on('Superseded'), inherited: on('Inherited') };
}

function textOf(content) {
  if (!content) return '';
  if (typeof content === 'string') return content;
  return content.text ?? content.output ?? content.delta ?? content.message ?? '';
}

export class Timeline {
  /**
   * @param sessionId the session shown (events of another one are inherited)
   * @param list the <ol> the rows go in
   * @param hooks {feedbackBar(event) → Element|null, attachment(block) → Element,
   *               sessionLink(id) → Element}
   */
  constructor(sessionId, list, hooks) {
    this.sessionId = sessionId;
    this.list = list;
    this.hooks = hooks;
    this.lastSeq = 0;
    this.inherited = new Set(); // "<session>:<seq>" of inherited events shown
    /** invocation id → {runId, status, live: {row, text, el} | null, reasoning} */
    this.invocations = new Map();
    this.group = null; // the control row consecutive deltas fold into
  }

  invocation(id) {
    if (!this.invocations.has(id)) {
      this.invocations.set(id, { runId: null, status: null, live: null, reasoning: null });
    }
    return this.invocations.get(id);
  }

  /** The session's own invocation still running, if any (the one a Cancel would stop).
   * A run a fork inherited is not: its history stops at the fork point, often before the
   * run's terminal status, and it goes on (or ended) in the parent. */
  running() {
    for (const [id, inv] of this.invocations) {
      if (!inv.inherited && inv.status === 'in_progress') return { invocationId: id, runId: inv.runId };
    }
    return null;
  }

  /** The status of the session's own latest run. */
  lastStatus() {
    let last = null;
    for (const inv of this.invocations.values()) if (!inv.inherited) last = inv.status ?? last;
    return last;
  }

  /** Adds one event; returns whether it was new. */
  add(e) {
    const inherited = flags(e).inherited || Boolean(e.SessionId && e.SessionId !== this.sessionId);
    if (inherited) {
      const key = `${e.SessionId}:${e.SeqId}`;
      if (this.inherited.has(key)) return false;
      this.inherited.add(key);
    } else {
      if (!(e.SeqId > this.lastSeq)) return false;
      this.lastSeq = e.SeqId;
    }
    const inv = e.InvocationId ? this.invocation(e.InvocationId) : null;
    if (inv && inherited) inv.inherited = true;
    if (inv && e.RunId) inv.runId = e.RunId;
    if (!(e.EventType === 'text_delta' || e.EventType === 'reasoning_delta')) this.group = null;
    const row = this.render(e, inv);
    if (row) this.list.append(row);
    return true;
  }

  /** One event's row: a meta line (seq, type, role, time) above the body, or, for a
   * compact kind, seq, body and time on one line. */
  row(e, kind, ...body) {
    const { superseded, inherited } = flags(e);
    const quiet = QUIET.has(e.EventType);
    const compact = COMPACT.has(kind.split(' ')[0]);
    const classes = ['event', `event-${kind}`, compact && 'compact', quiet && 'quiet', superseded && 'is-superseded', inherited && 'is-inherited'];
    const tags = [superseded && h('span', { class: 'tag' }, 'superseded'), inherited && h('span', { class: 'tag' }, 'inherited')];
    // The seq opens the event as stored (its JSON), for when the rendering hides a field.
    const raw = h('pre', { class: 'raw', hidden: true });
    const seq = h(
      'button',
      {
        type: 'button',
        class: 'seq',
        title: `${e.EventType}: show the event's JSON`,
        'aria-expanded': 'false',
        onclick: (ev) => {
          raw.hidden = !raw.hidden;
          if (!raw.hidden && !raw.textContent) raw.textContent = pretty(e);
          ev.currentTarget.setAttribute('aria-expanded', String(!raw.hidden));
        },
      },
      `#${e.SeqId}`,
    );
    const time = h('time', { datetime: e.Timestamp }, clock(e.Timestamp));
    const attrs = { class: classes.filter(Boolean).join(' '), dataset: { seq: e.SeqId, type: e.EventType } };
    if (compact) {
      return h('li', attrs, h('div', { class: 'compact-line' }, seq, h('div', { class: 'compact-body' }, ...body), tags, time), raw);
    }
    const meta = h('div', { class: 'event-meta' }, seq, h('span', { class: 'type' }, e.EventType), e.Role && h('span', { class: 'role' }, e.Role), tags, time);
    return h('li', attrs, meta, ...body, raw);
  }

  render(e, inv) {
    const c = e.Content || {};
    switch (e.EventType) {
      case 'message':
        return this.message(e, inv);
      case 'text_delta':
      case 'reasoning_delta':
        return this.delta(e, inv);
      case 'reasoning':
        if (inv?.reasoning) inv.reasoning.remove();
        if (inv) inv.reasoning = null;
        return this.row(e, 'reasoning', h('details', { class: 'reasoning' }, h('summary', {}, 'Reasoning'), h('div', { class: 'text' }, textOf(c))));
      case 'tool_call':
        return this.row(
          e,
          'tool',
          h('div', { class: 'card tool-card' }, h('div', { class: 'card-title' }, 'Tool call ', h('code', {}, c.name || '?'), h('span', { class: 'muted' }, ` ${c.call_id || ''}`)), h('pre', {}, pretty(c.arguments ?? ''))),
        );
      case 'tool_result':
        return this.row(
          e,
          'tool',
          h('div', { class: 'card tool-card result' }, h('div', { class: 'card-title' }, 'Tool result ', c.name && h('code', {}, c.name), h('span', { class: 'muted' }, ` ${c.call_id || ''}`)), h('pre', {}, textOf(c))),
        );
      case 'run_status':
        return this.status(e, inv);
      case 'error':
        return this.row(e, 'error', h('div', { class: 'card error-card' }, h('strong', {}, c.code || 'error'), ' ', c.message || pretty(c)));
      case 'run_checkpoint':
        return this.row(
          e,
          'checkpoint',
          h('div', { class: 'line' }, icon('flag'), h('span', {}, 'Checkpoint '), h('strong', {}, c.phase || ''), c.next_node && h('span', { class: 'muted' }, ` → next: ${c.next_node}`), h('code', { class: 'muted' }, ` ${short(c.checkpoint_id)}`)),
        );
      case 'compaction':
      case 'compaction_boundary':
      case 'context_checkpoint':
        return this.row(
          e,
          'divider',
          h('div', { class: 'divider-line' }, h('span', {}, e.EventType === 'context_checkpoint' ? 'Context checkpoint' : 'Compaction boundary')),
          (c.summary || c.Summary) && h('details', { class: 'summary' }, h('summary', {}, `Summary of seq ${c.seq_start ?? c.SeqStart ?? '?'}–${c.seq_end ?? c.SeqEnd ?? '?'}`), h('div', { class: 'text' }, c.summary || c.Summary)),
        );
      case 'session_fork': {
        const parent = c.parent_session_id || c.session_id || c.SessionId;
        const at = c.parent_seq ?? c.seq ?? c.SeqId ?? '?';
        return this.row(e, 'divider', h('div', { class: 'divider-line' }, h('span', {}, 'Forked from ', parent ? this.hooks.sessionLink(parent) : '?', ` at seq ${at}`)));
      }
      case 'session_restore':
        return this.row(e, 'divider', h('div', { class: 'divider-line' }, h('span', {}, `Session restored into the agent (${c.reason || 'forgotten'})`)));
      case 'http_exchange':
        return this.row(e, 'http', h('div', { class: 'line mono' }, `${c.request?.method || ''} ${c.request?.path || ''}`, h('span', { class: 'muted' }, ' → '), h('strong', {}, String(c.response?.status ?? '?'))));
      case 'http_request':
        return this.row(e, 'http', h('div', { class: 'line mono' }, `${c.method || ''} ${c.path || ''}`, h('span', { class: 'muted' }, ' (streaming response)')));
      case 'http_response':
        return this.row(e, 'http', h('div', { class: 'line mono' }, h('span', { class: 'muted' }, '→ '), h('strong', {}, String(c.status ?? '?'))));
      case 'agent_event':
        return this.row(e, 'agent', h('div', { class: 'line' }, agentSummary(c)));
      default:
        return this.row(e, 'other', QUIET.has(e.EventType) ? null : h('pre', { class: 'small' }, pretty(c)));
    }
  }

  message(e, inv) {
    const c = e.Content || {};
    const role = e.Role || 'user';
    if (role === 'assistant' && inv?.live) {
      inv.live.row.remove();
      inv.live = null;
    }
    const blocks = Array.isArray(c.content) ? c.content : [];
    const extras = blocks.filter((b) => b.type && b.type !== 'text').map((b) => this.hooks.attachment(b));
    const bubble = h('div', { class: `bubble bubble-${role}` }, h('div', { class: 'text' }, textOf(c)), extras.length ? h('div', { class: 'attachments' }, extras) : null);
    const row = this.row(e, `message msg-${role}`, bubble);
    if (role === 'assistant' && e.InvocationId) {
      const bar = this.hooks.feedbackBar(e);
      if (bar) bubble.append(bar);
    }
    return row;
  }

  /** A delta: added to the invocation's live answer (or reasoning), and folded into one
   * control row with the deltas next to it. */
  delta(e, inv) {
    const piece = e.Content?.delta ?? '';
    const reasoning = e.EventType === 'reasoning_delta';
    if (inv && !reasoning) {
      if (!inv.live) {
        const text = h('div', { class: 'text' });
        const row = h('li', { class: 'event event-message msg-assistant live', dataset: { live: 'true', invocation: e.InvocationId } }, h('div', { class: 'event-meta' }, h('span', { class: 'role' }, 'assistant'), h('span', { class: 'typing' }, 'streaming')), h('div', { class: 'bubble bubble-assistant streaming' }, text));
        this.list.append(row);
        inv.live = { row, el: text, text: '' };
      }
      inv.live.text += piece;
      inv.live.el.textContent = inv.live.text;
    }
    if (inv && reasoning) {
      if (!inv.reasoning) {
        const text = h('div', { class: 'text' });
        inv.reasoning = h('li', { class: 'event event-reasoning live' }, h('details', { class: 'reasoning' }, h('summary', {}, 'Reasoning…'), text));
        inv.reasoning.text = text;
        this.list.append(inv.reasoning);
      }
      inv.reasoning.text.textContent += piece;
    }
    const g = this.group;
    if (g && g.type === e.EventType && g.invocation === e.InvocationId) {
      g.count += 1;
      g.text += piece;
      g.label.textContent = `${e.EventType} ×${g.count} · seq ${g.first}–${e.SeqId}`;
      g.body.textContent = g.text;
      return null;
    }
    const label = h('span', { class: 'type' }, `${e.EventType} ×1 · seq ${e.SeqId}`);
    const body = h('pre', { class: 'small' }, piece);
    this.group = { type: e.EventType, invocation: e.InvocationId, count: 1, first: e.SeqId, text: piece, label, body };
    const { superseded, inherited } = flags(e);
    const classes = `event compact event-delta quiet${superseded ? ' is-superseded' : ''}${inherited ? ' is-inherited' : ''}`;
    return h('li', { class: classes, dataset: { seq: e.SeqId, type: e.EventType } }, h('div', { class: 'compact-line' }, h('span', { class: 'seq' }, `#${e.SeqId}`), h('details', { class: 'delta-group' }, h('summary', {}, label), body), h('time', { datetime: e.Timestamp }, clock(e.Timestamp))));
  }

  status(e, inv) {
    const c = e.Content || {};
    const status = c.status;
    if (inv) inv.status = status;
    if (TERMINAL.has(status) && inv) {
      if (inv.live) {
        // The run ended without a final message: what streamed is all there is.
        inv.live.row.classList.remove('live');
        inv.live.row.classList.add('partial');
        inv.live.row.querySelector('.streaming')?.classList.remove('streaming');
        const typing = inv.live.row.querySelector('.typing');
        if (typing) typing.textContent = `partial answer (run ${status})`;
        inv.live = null;
      }
      if (inv.reasoning) inv.reasoning.classList.remove('live');
    }
    const m = e.Metadata || {};
    const usage = m.usage ? `${m.usage.total_tokens ?? '?'} tokens` : null;
    const what =
      status === 'in_progress'
        ? [m.resumed_from_checkpoint ? 'Run resumed' : 'Run started', m.surface && h('span', { class: 'muted' }, ` · ${m.surface}${m.stream ? ' · stream' : ''}`)]
        : [`Run ${status}`, c.reason && h('span', { class: 'muted' }, ` · ${c.reason}`), usage && h('span', { class: 'muted' }, ` · ${usage}`)];
    const mark = status === 'in_progress' ? h('span', { class: 'badge badge-started' }, 'started') : badge(status);
    return this.row(e, `status status-${status}`, h('div', { class: 'lifecycle' }, mark, h('span', { class: 'what' }, what), h('code', { class: 'muted', title: `run ${e.RunId || ''}, invocation ${e.InvocationId || ''}` }, short(e.RunId))));
  }
}

/** One line saying what an A2A or ADK event is. */
function agentSummary(c) {
  const kind = c.kind || c.result?.kind || (c.author ? `event from ${c.author}` : 'agent event');
  const state = c.status?.state || c.result?.status?.state;
  const parts = c.content?.parts || c.parts || c.status?.message?.parts || c.artifact?.parts || [];
  const text = parts.map((p) => p.text).filter(Boolean).join(' ');
  return [h('strong', {}, kind), state && h('span', { class: 'muted' }, ` · ${state}`), text && h('span', {}, ` — ${text}`)];
}
