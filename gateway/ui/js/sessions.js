// The sessions list in the sidebar: the account's sessions, most recently active first,
// a page at a time, each with its latest run's state and how many approvals wait on it; a fork names its parent. The search
// box asks the gateway for the sessions with a message that has every word typed
// (ListSessions' `Query`, a full-text index), and Enter opens the session with exactly
// that id.

import { call } from './api.js';
import { h, replace, ago, badge } from './dom.js';
import { pendingBySession, approvalBadge } from './approvals.js';

const PAGE_SIZE = 20;

export class SessionList {
  constructor({ list, search, pager, current }) {
    this.list = list;
    this.search = search;
    this.pager = pager;
    this.current = current; // () → the open session's id
    this.page = 1;
    this.total = 0;
    this.sessions = [];
    this.pending = new Map(); // session id → pending approvals
    let typing = null;
    search.addEventListener('input', () => {
      clearTimeout(typing);
      typing = setTimeout(() => {
        this.page = 1;
        this.refresh().catch(() => {});
      }, 250);
    });
    search.addEventListener('keydown', (ev) => {
      const id = search.value.trim();
      if (ev.key === 'Enter' && id) location.hash = `#/sessions/${encodeURIComponent(id)}`;
    });
  }

  async refresh() {
    const query = this.search.value.trim();
    const data = await call('ListSessions', { Page: this.page, PageSize: PAGE_SIZE, ...(query && { Query: query }) });
    const pages = Math.max(1, Math.ceil(data.Total / PAGE_SIZE));
    if (this.page > pages) {
      this.page = pages;
      return this.refresh();
    }
    this.sessions = data.Sessions;
    this.total = data.Total;
    this.pending = await pendingBySession().catch(() => new Map());
    this.draw();
  }

  draw() {
    const needle = this.search.value.trim();
    const shown = this.sessions;
    const open = this.current();
    const items = shown.map((s) => {
      const parent = s.ForkedFrom?.SessionId;
      return h(
        'li',
        { class: `session-item${s.SessionId === open ? ' active' : ''}` },
        h('a', { href: `#/sessions/${encodeURIComponent(s.SessionId)}`, class: 'session-link', 'aria-current': s.SessionId === open ? 'page' : null }, s.SessionId),
        h(
          'div',
          { class: 'session-sub' },
          badge(s.LastRunStatus),
          approvalBadge(this.pending.get(s.SessionId)),
          h('span', { class: 'muted' }, `${s.LastSeqId} events`),
          h('span', { class: 'muted', title: s.UpdatedAt }, ago(s.UpdatedAt)),
        ),
        parent && h('div', { class: 'session-fork muted' }, 'fork of ', h('a', { href: `#/sessions/${encodeURIComponent(parent)}` }, parent)),
      );
    });
    if (!items.length) {
      items.push(
        h(
          'li',
          { class: 'empty' },
          needle ? ['No session has a message with these words. Press Enter to open the session ', h('code', {}, needle), '.'] : 'No sessions yet. Send a message to start one.',
        ),
      );
    }
    replace(this.list, items);
    const pages = Math.max(1, Math.ceil(this.total / PAGE_SIZE));
    replace(
      this.pager,
      h('button', { type: 'button', class: 'ghost small', disabled: this.page <= 1, onclick: () => this.go(this.page - 1) }, 'Previous'),
      h('span', { class: 'muted', title: `page ${this.page} of ${pages}` }, `${this.page} / ${pages} · ${this.total} ${this.total === 1 ? 'session' : 'sessions'}`),
      h('button', { type: 'button', class: 'ghost small', disabled: this.page >= pages, onclick: () => this.go(this.page + 1) }, 'Next'),
    );
  }

  go(page) {
    this.page = page;
    this.refresh().catch(() => {});
  }
}
