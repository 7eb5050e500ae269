// One session's page: its timeline (read with ListSessionEvents, then followed live with
// SubscribeRunEvents from the last position shown, re-attached after a reload or a dropped
// connection), the composer that starts a run on /v1/responses, Cancel, checkpoints
// with their resume preview, Resume and Fork, Compact, feedback on answers, and the
// workspace files, and the approvals its runs wait for. Without a session id it is the page that starts a new conversation.

import { call, startStream, drain, frames, subscribe, fileContent, dataUrl } from './api.js';
import { h, replace, icon, badge, bytes, ago } from './dom.js';
import { Timeline, TERMINAL } from './timeline.js';
import { WorkspacePanel } from './workspace.js';
import { ApprovalsPanel } from './approvals.js';

const PAGE = 500;
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

export class SessionView {
  /**
   * @param bootstrap GetAgentUiBootstrap's answer without a session
   * @param sessionId the session shown, or null for a new conversation
   * @param onChange called when a run starts or ends (the sidebar refreshes)
   */
  constructor(main, { bootstrap, sessionId, onChange }) {
    this.main = main;
    this.boot = bootstrap;
    this.lifecycle = bootstrap.RunLifecycle;
    this.id = sessionId;
    this.onChange = onChange;
    this.abort = new AbortController();
    this.attachments = [];
    this.feedback = new Map(); // invocation id → latest rating
    this.bars = new Map(); // invocation id → feedback bars on screen
    this.build();
  }

  close() {
    this.abort.abort();
  }

  // ---------------------------------------------------------------------------------
  // Layout

  build() {
    const features = this.boot.Features;
    this.statusBadge = h('span', { class: 'header-status' });
    this.connection = h('span', { class: 'connection muted', role: 'status' });
    this.cancelButton = h('button', { type: 'button', class: 'danger', hidden: true, onclick: () => this.cancel() }, icon('stop'), 'Cancel');
    this.compactButton = features.Compaction && this.id ? h('button', { type: 'button', class: 'ghost', onclick: () => this.compact() }, icon('compact'), 'Compact') : null;
    const header = h(
      'header',
      { class: 'session-header' },
      h('div', { class: 'title' }, h('h1', {}, this.id ? [h('span', { class: 'label' }, 'Session'), h('code', { class: 'session-id' }, this.id)] : 'New conversation'), this.statusBadge, this.connection),
      h('div', { class: 'actions' }, this.cancelButton, this.compactButton),
    );
    this.notice = h('div', { class: 'notice', role: 'alert', hidden: true });

    this.list = h('ol', { class: 'timeline', 'aria-label': 'Events' });
    this.timeline = new Timeline(this.id, this.list, {
      feedbackBar: (e) => this.feedbackBar(e),
      attachment: (block) => this.attachment(block),
      sessionLink: (id) => h('a', { href: `#/sessions/${encodeURIComponent(id)}` }, id),
    });
    const controlToggle = h('input', { type: 'checkbox', id: 'show-control', onchange: (ev) => this.list.classList.toggle('show-quiet', ev.target.checked) });
    this.count = h('span', { class: 'muted' });
    const toolbar = h('div', { class: 'timeline-toolbar' }, this.count, h('label', { class: 'toggle' }, controlToggle, ' Show control events'));
    this.scroller = h('div', { class: 'timeline-scroll' }, this.id ? null : this.welcome(), this.list);

    this.approvals = this.id ? new ApprovalsPanel(this.id, () => this.onChange()) : null;
    const column = h('section', { class: 'timeline-col', 'aria-label': 'Conversation' }, this.id ? toolbar : null, this.scroller, this.approvals?.el, this.composer());
    const inspector = this.id || features.WorkspaceFiles ? this.inspector() : null;
    replace(this.main, h('div', { class: 'session' }, header, this.notice, h('div', { class: `session-body${inspector ? '' : ' no-inspector'}` }, column, inspector)));
  }

  welcome() {
    const agent = this.boot.Agent;
    return h(
      'div',
      { class: 'welcome' },
      h('h2', {}, 'Start a conversation'),
      h('p', { class: 'muted' }, agent.RunPath ? ['Messages go to ', h('code', {}, agent.Name), ' through ', h('code', {}, agent.RunPath), '. Tether records every event; the run keeps going if you close this page.'] : [`This agent speaks ${agent.Protocol}: start runs with its own clients. Their sessions show up on the left.`]),
    );
  }

  composer() {
    const agent = this.boot.Agent;
    this.input = h('textarea', {
      id: 'composer-input',
      rows: 2,
      placeholder: agent.RunPath ? 'Message the agent — Enter to send, Shift+Enter for a new line' : 'This agent protocol has no run action here',
      disabled: !agent.RunPath,
      onkeydown: (ev) => {
        if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing) {
          ev.preventDefault();
          this.form.requestSubmit();
        }
      },
    });
    this.chips = h('div', { class: 'chips' });
    this.fileInput = h('input', { type: 'file', multiple: true, class: 'hidden-input', tabindex: '-1', 'aria-hidden': 'true', onchange: () => this.upload() });
    this.sendButton = h('button', { type: 'submit', class: 'primary', disabled: !agent.RunPath }, icon('send'), 'Send');
    this.composerError = h('div', { class: 'composer-error', role: 'alert' });
    const upload = this.boot.Features.Uploads ? h('button', { type: 'button', class: 'ghost', onclick: () => this.fileInput.click() }, icon('clip'), 'Upload') : null;
    this.form = h(
      'form',
      { class: 'composer', onsubmit: (ev) => (ev.preventDefault(), this.send()) },
      this.chips,
      h('label', { for: 'composer-input', class: 'sr-only' }, 'Message'),
      this.input,
      h('div', { class: 'composer-bar' }, upload, this.fileInput, h('span', { class: 'hint muted' }), this.sendButton),
      this.composerError,
    );
    return this.form;
  }

  inspector() {
    const tabs = [];
    if (this.id) tabs.push(['checkpoints', 'Checkpoints'], ['feedback', 'Feedback']);
    if (this.boot.Features.WorkspaceFiles) tabs.push(['files', 'Files']);
    this.panels = {};
    const bar = h('div', { class: 'tabs', role: 'tablist' });
    const body = h('div', { class: 'tab-panels' });
    for (const [key, label] of tabs) {
      const tab = h('button', { type: 'button', role: 'tab', id: `tab-${key}`, 'aria-controls': `panel-${key}`, onclick: () => this.showTab(key) }, label);
      const panel = h('div', { role: 'tabpanel', id: `panel-${key}`, 'aria-labelledby': `tab-${key}`, class: 'panel' });
      this.panels[key] = { tab, panel };
      bar.append(tab);
      body.append(panel);
    }
    if (this.panels.files) this.files = new WorkspacePanel(this.panels.files.panel);
    this.showTab(tabs[0][0]);
    return h('aside', { class: 'inspector', 'aria-label': 'Inspector' }, bar, body);
  }

  showTab(key) {
    for (const [k, { tab, panel }] of Object.entries(this.panels)) {
      tab.setAttribute('aria-selected', String(k === key));
      panel.hidden = k !== key;
    }
    if (key === 'files' && !this.filesOpened) {
      this.filesOpened = true;
      this.files.open('');
    }
  }

  say(message, kind = 'error') {
    this.notice.hidden = !message;
    this.notice.className = `notice notice-${kind}`;
    this.notice.textContent = message || '';
  }

  // ---------------------------------------------------------------------------------
  // The log: read, then followed

  async start() {
    if (!this.id) {
      this.input.focus();
      return;
    }
    try {
      let offset = 0;
      for (;;) {
        const page = await call('ListSessionEvents', { SessionId: this.id, Offset: offset, Limit: PAGE });
        for (const e of page.Events) this.timeline.add(e);
        // A position cursor: the seq, except in a fork, whose inherited events come first.
        const last = page.Events[page.Events.length - 1];
        if (last) offset = last.Position ?? last.SeqId;
        if (page.Events.length < PAGE) break;
      }
      // SubscribeRunEvents takes the same cursor, and its ids are positions too.
      this.cursor = offset;
    } catch (e) {
      this.say(e.status === 404 ? `Session ${this.id} not found.` : e.message);
      this.form.hidden = true;
      return;
    }
    this.update(true);
    this.refreshFeedback();
    this.refreshGates();
    this.approvals.refresh();
    this.follow();
  }

  /** Follows the session from the last position shown until the page closes; every dropped or
   * timed-out stream is re-attached from where it stopped, so nothing shows twice and
   * nothing is missed. */
  async follow() {
    const { signal } = this.abort;
    let delay = 250;
    while (!signal.aborted) {
      try {
        const response = await subscribe(this.id, this.cursor ?? this.timeline.lastSeq, signal);
        this.connection.textContent = '';
        delay = 250;
        for await (const frame of frames(response)) {
          if (frame.data === '[DONE]') continue;
          this.receive(JSON.parse(frame.data));
          if (frame.id) this.cursor = Number(frame.id);
        }
      } catch (e) {
        if (signal.aborted) return;
        this.connection.textContent = 'reconnecting…';
        delay = Math.min(delay * 2, 5000);
      }
      await sleep(delay);
    }
  }

  receive(e) {
    const before = this.timeline.lastStatus();
    if (!this.timeline.add(e)) return;
    this.update();
    // A run that waits for a person, or a request answered elsewhere (or by the timeout).
    if (e.EventType === 'run_status' || String(e.EventType).startsWith('approval')) this.approvals.refresh();
    if (e.EventType === 'run_status') {
      const status = e.Content?.status;
      if (status === 'in_progress' || (TERMINAL.has(status) && before !== status)) this.onChange();
      if (TERMINAL.has(status)) {
        this.refreshGates();
      }
    }
  }

  /** Header, Cancel and composer state after events arrived; keeps the view at the
   * bottom when it was there. */
  update(force = false) {
    const s = this.scroller;
    const atBottom = force || s.scrollHeight - s.scrollTop - s.clientHeight < 80;
    replace(this.statusBadge, badge(this.timeline.lastStatus()));
    const running = this.timeline.running();
    this.cancelButton.hidden = !(running && this.lifecycle.Cancel);
    const hint = this.form.querySelector('.hint');
    this.sendButton.disabled = Boolean(running) || !this.boot.Agent.RunPath || this.sending;
    hint.textContent = running ? 'A run is in progress: wait for it or cancel it.' : '';
    this.count.textContent = `${this.timeline.lastSeq} events`;
    if (atBottom) s.scrollTop = s.scrollHeight;
  }

  // ---------------------------------------------------------------------------------
  // Runs

  async send() {
    const text = this.input.value.trim();
    if (!text && !this.attachments.length) return;
    let input = text;
    if (this.attachments.length) {
      const parts = this.attachments.map((a) => (a.mime.startsWith('image/') ? { type: 'input_image', image_url: a.uri } : { type: 'input_file', filename: a.name, file_url: a.uri }));
      input = [{ role: 'user', content: [...(text ? [{ type: 'input_text', text }] : []), ...parts] }];
    }
    const body = { input, stream: true };
    if (this.id) body.conversation = this.id;
    this.sending = true;
    this.sendButton.disabled = true;
    this.composerError.textContent = '';
    try {
      const response = await startStream(this.boot.Agent.RunPath, body);
      this.input.value = '';
      this.attachments = [];
      replace(this.chips);
      const sessionId = response.headers.get('x-session-id');
      drain(response);
      if (!this.id && sessionId) {
        location.hash = `#/sessions/${encodeURIComponent(sessionId)}`;
      }
      this.onChange();
    } catch (e) {
      this.composerError.textContent = e.message;
    } finally {
      this.sending = false;
      this.update();
    }
  }

  async cancel() {
    const running = this.timeline.running();
    if (!running) return;
    this.cancelButton.disabled = true;
    try {
      await call('CancelRun', { InvocationId: running.invocationId });
    } catch (e) {
      this.say(e.message);
    } finally {
      this.cancelButton.disabled = false;
    }
  }

  async upload() {
    const files = [...this.fileInput.files];
    this.fileInput.value = '';
    for (const file of files) {
      try {
        const data = await call('UploadAttachment', { Data: await dataUrl(file), FileName: file.name });
        const chip = { uri: data.FileUri, name: file.name, mime: data.MimeType };
        this.attachments.push(chip);
        this.chips.append(
          h(
            'span',
            { class: 'chip' },
            icon('file'),
            `${file.name} · ${bytes(data.SizeBytes)}`,
            h('button', { type: 'button', class: 'chip-remove', 'aria-label': `Remove ${file.name}`, onclick: (ev) => (this.attachments.splice(this.attachments.indexOf(chip), 1), ev.currentTarget.parentElement.remove()) }, '×'),
          ),
        );
      } catch (e) {
        this.composerError.textContent = `${file.name}: ${e.message}`;
      }
    }
  }

  /** An image or file block of a message: fetched with the credential when it is a
   * Tether upload. */
  attachment(block) {
    const url = block.image_url || block.file_url || block.file_data || '';
    const name = block.filename || (block.type === 'image' ? 'image' : 'file');
    if (block.type === 'image') {
      const img = h('img', { alt: name, class: 'attachment-image' });
      if (url.startsWith('data:image/')) img.src = url;
      else if (url.startsWith('tether-upload://')) fileContent(url).then((f) => (img.src = URL.createObjectURL(f.blob))).catch(() => (img.alt = `${name} (unavailable)`));
      return img;
    }
    return h(
      'button',
      {
        type: 'button',
        class: 'chip',
        onclick: async () => {
          const f = await fileContent(url);
          const a = h('a', { href: URL.createObjectURL(f.blob), download: name });
          a.click();
        },
      },
      icon('file'),
      name,
    );
  }

  // ---------------------------------------------------------------------------------
  // Checkpoints: preview, Resume, Fork (each shown only when bootstrap allows it)

  async refreshGates() {
    try {
      const boot = await call('GetAgentUiBootstrap', { SessionId: this.id });
      this.lifecycle = boot.RunLifecycle;
      this.resumeMode = boot.RuntimeCapabilities?.ResumeRun?.ResumeMode;
    } catch {
      return;
    }
    this.update();
    this.refreshCheckpoints();
  }

  get canResume() {
    // Both flags: the session has a usable checkpoint, and the runtime can resume one.
    return Boolean(this.lifecycle.Checkpoints && this.lifecycle.CheckpointResume);
  }

  async refreshCheckpoints() {
    const panel = this.panels?.checkpoints?.panel;
    if (!panel) return;
    let data;
    try {
      data = await call('ListSessionCheckpoints', { SessionId: this.id, Limit: 200 });
    } catch (e) {
      replace(panel, h('p', { class: 'error' }, e.message));
      return;
    }
    this.preview = h('div', { class: 'checkpoint-preview' });
    const cards = data.Checkpoints.slice()
      .reverse()
      .map((c) => {
        const usable = c.CheckpointStatus === 'active' || c.CheckpointStatus === 'resumed';
        // Resume needs a usable checkpoint; a fork can start at any checkpoint, the one
        // that ended a turn included.
        const resumable = usable && this.canResume;
        const act = resumable || this.boot.Features.Fork;
        return h(
          'li',
          { class: `checkpoint${usable ? '' : ' spent'}` },
          h('div', { class: 'checkpoint-head' }, icon('flag'), h('strong', {}, c.Phase || 'checkpoint'), h('span', { class: `badge badge-ckpt-${c.CheckpointStatus}` }, c.CheckpointStatus)),
          h('div', { class: 'checkpoint-sub muted' }, `seq ${c.SeqId}`, c.NextNode ? ` · next: ${c.NextNode}` : '', c.ResumeCount ? ` · resumed ${c.ResumeCount}×` : '', ` · ${ago(c.Timestamp)}`),
          act && h('button', { type: 'button', class: 'ghost small', onclick: () => this.openCheckpoint(c, resumable) }, resumable && this.lifecycle.CheckpointResumePreview ? 'Preview' : 'Options'),
        );
      });
    if (!cards.length) cards.push(h('li', { class: 'empty' }, 'No checkpoints yet. Tether records one after each tool call, tool result and finished turn.'));
    const gate = this.canResume || !data.Checkpoints.length ? null : h('p', { class: 'muted small' }, this.lifecycle.CheckpointResume ? 'No checkpoint of this session can be resumed now.' : `Resume is not available for this agent (resume mode: ${this.resumeMode || 'unsupported'}).`);
    replace(panel, gate, this.preview, h('ul', { class: 'checkpoints' }, cards));
  }

  /** A checkpoint's panel: its resume preview and Resume (when `resumable`), and Fork. */
  async openCheckpoint(c, resumable) {
    const p = this.preview;
    replace(p, h('p', { class: 'muted' }, 'Loading preview…'));
    let preview = null;
    if (resumable && this.lifecycle.CheckpointResumePreview) {
      try {
        preview = (await call('GetCheckpointResumePreview', { SessionId: this.id, RunId: c.RunId, CheckpointId: c.CheckpointId })).Preview;
      } catch (e) {
        replace(p, h('p', { class: 'error' }, e.message));
        return;
      }
    }
    const instruction = h('textarea', { rows: 2, id: 'resume-instruction', placeholder: 'Optional: an instruction added after the checkpoint' });
    const result = h('p', { class: 'muted small', role: 'status' });
    const risk = preview?.Risk;
    const receipts = preview?.ToolReceipts || [];
    replace(
      p,
      h('div', { class: 'preview-head' }, h('strong', {}, `${c.Phase} · seq ${c.SeqId}`), h('button', { type: 'button', class: 'link', onclick: () => replace(p) }, 'Close')),
      preview &&
        h(
          'dl',
          { class: 'facts' },
          h('dt', {}, 'Can resume'),
          h('dd', {}, preview.CanResume ? 'yes' : `no — ${preview.Reason}`),
          h('dt', {}, 'Next'),
          h('dd', {}, preview.NextNode || '—'),
          h('dt', {}, 'Risk'),
          h('dd', {}, h('span', { class: `badge badge-risk-${risk.Level}` }, risk.Level), risk.DuplicateSideEffectRisk ? ' may repeat side effects' : ' no repeated side effects'),
          h('dt', {}, 'Receipts'),
          h('dd', {}, receipts.length ? receipts.map((r) => h('div', { class: 'receipt' }, h('code', {}, r.ToolName), ` ${r.Status}`)) : 'none after this checkpoint'),
        ),
      resumable && [h('label', { for: 'resume-instruction', class: 'small' }, 'Resume instruction'), instruction],
      h(
        'div',
        { class: 'row' },
        resumable && h('button', { type: 'button', class: 'primary small', disabled: preview && !preview.CanResume, onclick: () => this.resume(c, instruction.value.trim(), result) }, 'Resume'),
        this.boot.Features.Fork && h('button', { type: 'button', class: 'ghost small', onclick: () => this.fork(c, result) }, icon('fork'), 'Fork'),
      ),
      result,
    );
  }

  async resume(c, instruction, result) {
    result.textContent = 'Resuming…';
    const body = { SessionId: this.id, RunId: c.RunId, CheckpointId: c.CheckpointId, Stream: true };
    if (instruction) Object.assign(body, { ResumeInstructionEnabled: true, ResumeInstruction: instruction });
    try {
      const response = await startStream('/agentengine/api/v1/ResumeRun', body);
      if ((response.headers.get('content-type') || '').includes('json')) {
        const envelope = await response.json();
        result.textContent = envelope.Data?.status === 'noop' ? `Nothing to resume: ${envelope.Data.Reason}` : 'Done.';
        return;
      }
      result.textContent = 'Resumed: the run continues in the timeline.';
      drain(response);
    } catch (e) {
      result.textContent = e.message;
    }
  }

  async fork(c, result) {
    try {
      const data = await call('ForkSession', { SessionId: this.id, CheckpointId: c.CheckpointId });
      location.hash = `#/sessions/${encodeURIComponent(data.SessionId)}`;
      this.onChange();
    } catch (e) {
      result.textContent = e.message;
    }
  }

  async compact() {
    try {
      const data = await call('CompactSession', { SessionId: this.id });
      this.say(`Compacted seq ${data.SeqStart}–${data.SeqEnd} into a summary.`, 'info');
    } catch (e) {
      this.say(e.message);
    }
  }

  // ---------------------------------------------------------------------------------
  // Feedback

  feedbackBar(e) {
    if (!this.boot.Features.Feedback) return null;
    const inv = e.InvocationId;
    const comment = h('textarea', { rows: 2, maxlength: 2000, 'aria-label': 'Comment', placeholder: 'What was good or bad about it? (optional)' });
    const note = h('span', { class: 'feedback-note muted', role: 'status' });
    const form = h('form', { class: 'feedback-form', hidden: true }, comment, h('div', { class: 'row' }, h('button', { type: 'submit', class: 'primary small' }, 'Send feedback'), h('button', { type: 'button', class: 'ghost small', onclick: () => (form.hidden = true) }, 'Not now')));
    let rating = null;
    const thumb = (value, label) =>
      h(
        'button',
        {
          type: 'button',
          class: 'icon-button',
          'aria-label': label,
          title: label,
          'aria-pressed': 'false',
          dataset: { rating: value },
          onclick: () => {
            rating = value;
            form.hidden = false;
            comment.focus();
          },
        },
        icon(value),
      );
    const bar = h('div', { class: 'feedback' }, thumb('up', 'Good answer'), thumb('down', 'Bad answer'), note, form);
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      try {
        await call('CreateFeedback', { SessionId: this.id, InvocationId: inv, Rating: rating, Comment: comment.value });
        this.feedback.set(inv, rating);
        form.hidden = true;
        comment.value = '';
        this.markFeedback(inv);
        note.textContent = 'Thanks, feedback recorded.';
        this.refreshFeedback();
      } catch (err) {
        note.textContent = err.message;
      }
    });
    if (!this.bars.has(inv)) this.bars.set(inv, []);
    this.bars.get(inv).push(bar);
    queueMicrotask(() => this.markFeedback(inv));
    return bar;
  }

  markFeedback(inv) {
    const rating = this.feedback.get(inv);
    for (const bar of this.bars.get(inv) || []) {
      for (const b of bar.querySelectorAll('[data-rating]')) b.setAttribute('aria-pressed', String(b.dataset.rating === rating));
    }
  }

  async refreshFeedback() {
    const panel = this.panels?.feedback?.panel;
    if (!panel || !this.boot.Features.Feedback) return;
    let data;
    try {
      data = await call('ListFeedback', { SessionId: this.id, Limit: 200 });
    } catch (e) {
      replace(panel, h('p', { class: 'error' }, e.message));
      return;
    }
    // Newest first: the first record of an invocation is its current rating.
    for (const f of [...data.Feedback].reverse()) this.feedback.set(f.InvocationId, f.Rating);
    for (const inv of this.bars.keys()) this.markFeedback(inv);
    const rows = data.Feedback.map((f) =>
      h(
        'li',
        { class: 'feedback-item' },
        h('span', { class: `thumb thumb-${f.Rating}`, title: f.Rating }, icon(f.Rating)),
        h('div', {}, h('div', {}, f.Comment || h('span', { class: 'muted' }, 'no comment')), h('div', { class: 'muted small' }, `${ago(f.CreatedAt)} · ${f.ResponseId || f.RunId}`)),
      ),
    );
    if (!rows.length) rows.push(h('li', { class: 'empty' }, 'No feedback yet. Rate an answer with the thumbs under it.'));
    replace(panel, h('ul', { class: 'feedback-list' }, rows));
  }
}

