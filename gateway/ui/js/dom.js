// Small DOM helpers. Text always goes in as text (textContent), never as markup: every
// string the console shows may come from a prompt, an agent or a file.

/** Makes an element: h('a', {href: '#', class: 'x'}, 'text', child, [more]). */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith('on') && typeof value === 'function') {
      el.addEventListener(name.slice(2), value);
    } else if (name === 'dataset') {
      Object.assign(el.dataset, value);
    } else {
      el.setAttribute(name, value === true ? '' : String(value));
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
}

/** Replaces an element's children. */
export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

// A namespace name, never fetched.
const SVG = 'http://www.w3.org/2000/svg';

// 24x24 stroke icons (paths drawn for this console).
const ICONS = {
  up: 'M7 10v10H4V10h3Zm0 0 4-7c1.7 0 2.6 1 2.3 2.6L12.8 9H18a2 2 0 0 1 2 2.3l-1.2 7A2 2 0 0 1 16.8 20H7',
  down: 'M17 14V4h3v10h-3Zm0 0-4 7c-1.7 0-2.6-1-2.3-2.6l.5-3.4H6a2 2 0 0 1-2-2.3l1.2-7A2 2 0 0 1 7.2 4H17',
  stop: 'M7 7h10v10H7z',
  send: 'M4 12 20 4l-6 16-3-7-7-1Z',
  clip: 'M20 11.5 12.2 19.3a5 5 0 0 1-7-7L13 4.5a3.3 3.3 0 0 1 4.7 4.7l-7.8 7.8a1.7 1.7 0 0 1-2.4-2.4L14.6 7.5',
  fork: 'M6 3v6a3 3 0 0 0 3 3h6a3 3 0 0 1 3 3v6M6 3a2 2 0 1 0 0 .1M18 21a2 2 0 1 0 0-.1M6 9v12',
  compact: 'M4 8h16M4 12h16M8 16h8M10 20h4',
  refresh: 'M20 12a8 8 0 1 1-2.3-5.7M20 4v4h-4',
  folder: 'M3 6h6l2 2h10v11H3z',
  file: 'M6 3h8l4 4v14H6zM14 3v4h4',
  flag: 'M5 21V4h11l-2 4 2 4H5',
  plus: 'M12 5v14M5 12h14',
  search: 'M11 18a7 7 0 1 1 0-14 7 7 0 0 1 0 14Zm9 3-4.3-4.3',
  chevron: 'm9 6 6 6-6 6',
  key: 'M15 9a3 3 0 1 1 0-.1M13 11l-9 9m3-3 2 2m1-5 2 2',
};

/** An icon, hidden from assistive technology (its button carries the name). */
export function icon(name) {
  const svg = document.createElementNS(SVG, 'svg');
  svg.setAttribute('viewBox', '0 0 24 24');
  svg.setAttribute('aria-hidden', 'true');
  svg.setAttribute('class', 'icon');
  const path = document.createElementNS(SVG, 'path');
  path.setAttribute('d', ICONS[name] || '');
  svg.append(path);
  return svg;
}

/** "3 s ago", "5 min ago", a date for older times. */
export function ago(iso) {
  const then = Date.parse(iso);
  if (Number.isNaN(then)) return '';
  const s = Math.round((Date.now() - then) / 1000);
  if (s < 45) return 'just now';
  const fmt = new Intl.RelativeTimeFormat(undefined, { numeric: 'auto' });
  if (s < 3600) return fmt.format(-Math.round(s / 60), 'minute');
  if (s < 86400) return fmt.format(-Math.round(s / 3600), 'hour');
  if (s < 7 * 86400) return fmt.format(-Math.round(s / 86400), 'day');
  return new Date(then).toLocaleDateString();
}

/** HH:MM:SS of a timestamp. */
export function clock(iso) {
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? '' : d.toLocaleTimeString([], { hour12: false });
}

export function bytes(n) {
  if (n === null || n === undefined) return '';
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KB`;
  return `${(n / 1024 / 1024).toFixed(1)} MB`;
}

/** A run status as a badge. */
export function badge(status) {
  if (!status) return null;
  const label = status === 'in_progress' ? 'running' : status;
  return h('span', { class: `badge badge-${status}`, title: `run status: ${status}` }, label);
}

/** Pretty JSON for display. */
export function pretty(value) {
  if (typeof value === 'string') {
    try {
      return JSON.stringify(JSON.parse(value), null, 2);
    } catch {
      return value;
    }
  }
  return JSON.stringify(value, null, 2);
}
