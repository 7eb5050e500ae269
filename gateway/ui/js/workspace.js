// The workspace files panel: the account's directory under `workspace_dir`, browsed with
// ListWorkspaceFiles and previewed with AttachmentContent (images and text shown, anything
// else offered as a download).

import { call, fileContent } from './api.js';
import { h, replace, icon, bytes, ago } from './dom.js';

const PREVIEW_CHARS = 200_000;

export class WorkspacePanel {
  constructor(root) {
    this.root = root;
    this.path = '';
    this.preview = h('div', { class: 'file-preview' });
    this.listing = h('ul', { class: 'file-list', 'aria-label': 'Workspace files' });
    this.crumbs = h('nav', { class: 'crumbs', 'aria-label': 'Folder' });
    replace(root, this.crumbs, this.listing, this.preview);
    this.urls = [];
  }

  async open(path) {
    this.path = path;
    replace(this.preview);
    let data;
    try {
      data = await call('ListWorkspaceFiles', { Path: path });
    } catch (e) {
      replace(this.listing, h('li', { class: 'empty error' }, e.message));
      return;
    }
    const parts = data.Path ? data.Path.split('/') : [];
    replace(
      this.crumbs,
      h('button', { type: 'button', class: 'link', onclick: () => this.open('') }, 'workspace'),
      parts.map((name, i) => [h('span', { class: 'muted' }, ' / '), h('button', { type: 'button', class: 'link', onclick: () => this.open(parts.slice(0, i + 1).join('/')) }, name)]),
    );
    const rows = data.Files.map((f) =>
      h(
        'li',
        {},
        h(
          'button',
          { type: 'button', class: 'file-row', onclick: () => (f.IsDirectory ? this.open(f.Path) : this.show(f)) },
          icon(f.IsDirectory ? 'folder' : 'file'),
          h('span', { class: 'file-name' }, f.Name),
          h('span', { class: 'muted' }, f.IsDirectory ? '' : bytes(f.SizeBytes)),
          h('span', { class: 'muted' }, f.ModifiedAt ? ago(f.ModifiedAt) : ''),
        ),
      ),
    );
    if (!rows.length) rows.push(h('li', { class: 'empty' }, 'This folder is empty.'));
    if (data.Truncated) rows.push(h('li', { class: 'empty' }, `Showing the first ${data.Files.length} of ${data.Total} entries.`));
    replace(this.listing, rows);
  }

  async show(f) {
    this.urls.forEach((u) => URL.revokeObjectURL(u));
    this.urls = [];
    replace(this.preview, h('div', { class: 'muted' }, `Loading ${f.Name}…`));
    try {
      const file = await fileContent(f.Path);
      const url = URL.createObjectURL(file.blob);
      this.urls.push(url);
      const head = h('div', { class: 'preview-head' }, h('strong', {}, f.Name), h('span', { class: 'muted' }, ` ${file.type} · ${bytes(file.blob.size)}`), h('a', { href: url, download: file.name, class: 'button ghost small' }, 'Download'));
      let body = null;
      if (file.inline && file.type.startsWith('image/')) {
        body = h('img', { src: url, alt: f.Name, class: 'preview-image' });
      } else if (file.inline && file.type.startsWith('text/')) {
        const text = await file.blob.text();
        body = h('pre', { class: 'preview-text' }, text.length > PREVIEW_CHARS ? `${text.slice(0, PREVIEW_CHARS)}\n…` : text);
      } else {
        body = h('p', { class: 'muted' }, 'No preview for this type; download it to open it.');
      }
      replace(this.preview, head, body);
    } catch (e) {
      replace(this.preview, h('div', { class: 'error' }, e.message));
    }
  }
}
