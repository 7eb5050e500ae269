// Pending approvals: runs that wait for a person (ListPendingApprovals), answered with
// Approve or Reject (ResolveApproval), with an optional comment and, for protocols that
// carry them, edited arguments. The answer's run shows in the session's timeline like
// any other run: the page already follows the session.

import { call } from './api.js';
import { h, replace, clock, ago, pretty } from './dom.js';

/** The most pending approvals one list asks for (ListPendingApprovals' own maximum). */
const LIMIT = 200;

/** Protocols whose answer has no field for edited arguments (a Responses
 * `mcp_approval_response` carries only approve and a reason). */
const NO_EDITED_ARGUMENTS = new Set(['openai-responses']);

/** Pending approvals per session id, for the session list's badges. */
export async function pendingBySession() {
  const data = await call('ListPendingApprovals', { Limit: LIMIT });
  const counts = new Map();
  for (const a of data.Approvals) counts.set(a.SessionId, (counts.get(a.SessionId) || 0) + 1);
  return counts;
}

/** A session's pending-approval count as a badge, or null without any. */
export function approvalBadge(count) {
  if (!count) return null;
  const label = count === 1 ? '1 approval' : `${count} approvals`;
  return h('span', { class: 'badge badge-approval', title: `${label} waiting for a decision` }, label);
}

export class ApprovalsPanel {
  /**
   * @param sessionId the session whose pending approvals are shown
   * @param onResolved called after a decision was accepted (the sidebar refreshes)
   */
  constructor(sessionId, onResolved) {
    this.id = sessionId;
    this.onResolved = onResolved;
    this.list = h('ul', { class: 'approval-list' });
    this.status = h('p', { class: 'approval-status small', role: 'status', hidden: true });
    this.el = h('section', { class: 'approvals', 'aria-label': 'Pending approvals', hidden: true }, h('h2', {}, 'Waiting for your decision'), this.list, this.status);
    this.shown = new Set(); // request ids on screen: a refresh keeps what is being typed
  }

  async refresh() {
    let data;
    try {
      data = await call('ListPendingApprovals', { SessionId: this.id, Limit: LIMIT });
    } catch (e) {
      this.say(e.message, 'error');
      return;
    }
    const pending = new Set(data.Approvals.map((a) => a.RequestId));
    for (const item of [...this.list.children]) {
      if (!pending.has(item.dataset.requestId)) {
        this.shown.delete(item.dataset.requestId);
        item.remove();
      }
    }
    for (const a of data.Approvals) {
      if (this.shown.has(a.RequestId)) continue;
      this.shown.add(a.RequestId);
      this.list.append(this.item(a));
    }
    this.el.hidden = !this.list.children.length && this.status.hidden;
  }

  /** A line under the list that outlives the items (a decision's outcome). */
  say(message, kind) {
    this.status.textContent = message;
    this.status.className = `approval-status small ${kind}`;
    this.status.hidden = false;
    this.el.hidden = false;
  }

  item(a) {
    const comment = h('textarea', { rows: 2, maxlength: 2000, class: 'approval-comment', 'aria-label': 'Comment', placeholder: 'Comment (optional)' });
    const editable = !NO_EDITED_ARGUMENTS.has(a.Protocol);
    const args = editable ? h('textarea', { rows: 3, class: 'approval-arguments-edit', spellcheck: 'false', 'aria-label': 'Arguments (JSON)' }) : null;
    if (args) args.value = pretty(a.Arguments ?? {});
    const error = h('p', { class: 'error small', role: 'alert' });
    const decide = (decision) => this.resolve(a, decision, { comment, args, error, buttons });
    const buttons = [
      h('button', { type: 'button', class: 'primary small', onclick: () => decide('approve') }, 'Approve'),
      h('button', { type: 'button', class: 'danger small', onclick: () => decide('reject') }, 'Reject'),
    ];
    return h(
      'li',
      { class: 'approval', dataset: { requestId: a.RequestId } },
      h('div', { class: 'approval-head' }, h('code', { class: 'approval-tool' }, a.Tool || '(no tool)'), h('span', { class: `badge badge-kind-${a.Kind}` }, a.Kind), h('span', { class: 'muted small', title: a.RequestedAt }, `requested ${clock(a.RequestedAt)} · ${ago(a.RequestedAt)}`)),
      a.Question && h('p', { class: 'approval-question' }, a.Question),
      editable ? [h('div', { class: 'muted small' }, 'Arguments (edit to change them)'), args] : h('pre', { class: 'approval-arguments' }, pretty(a.Arguments ?? {})),
      comment,
      h('div', { class: 'row' }, buttons),
      error,
    );
  }

  async resolve(a, decision, { comment, args, error, buttons }) {
    const body = { SessionId: this.id, RequestId: a.RequestId, Decision: decision };
    if (comment.value.trim()) body.Comment = comment.value.trim();
    if (args && args.value.trim() !== pretty(a.Arguments ?? {})) {
      try {
        body.Arguments = JSON.parse(args.value);
      } catch (e) {
        error.textContent = `The arguments are not JSON: ${e.message}`;
        return;
      }
    }
    error.textContent = '';
    for (const b of buttons) b.disabled = true;
    try {
      const data = await call('ResolveApproval', body);
      const verb = decision === 'approve' ? 'Approved' : 'Rejected';
      this.say(`${verb} ${a.Tool || a.RequestId}: the answer runs as ${data.AnswerInvocationId}.`, 'info');
      this.onResolved();
    } catch (e) {
      if (e.code === 'approval_resolved') {
        // Someone (or the timeout) answered first: the item leaves the list, the
        // message stays.
        const by = e.data?.ResolvedBy?.account_id;
        this.say(`${a.Tool || a.RequestId} was already resolved (${e.data?.Decision || 'answered'}${by ? ` by ${by}` : ''}): your decision was not applied.`, 'error');
      } else {
        error.textContent = e.message;
        for (const b of buttons) b.disabled = false;
        return;
      }
    }
    await this.refresh();
  }
}
