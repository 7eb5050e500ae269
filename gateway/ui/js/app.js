// The console's entry point: asks Tether what it offers (GetAgentUiBootstrap), asks for a
// credential when a request is refused with 401, and routes `#/` (a new conversation)
// and `#/sessions/<id>` to their pages.

import { call, credential, onCredentialNeeded } from './api.js';
import { h, replace } from './dom.js';
import { SessionList } from './sessions.js';
import { SessionView } from './session.js';

const $ = (id) => document.getElementById(id);

/** The login dialog: resolves once a credential was entered. */
function askCredential(reason) {
  const dialog = $('login');
  const input = $('login-key');
  const error = $('login-error');
  error.textContent = reason ? `Refused: ${reason}` : '';
  credential.clear();
  input.value = '';
  if (!dialog.open) dialog.showModal();
  input.focus();
  return new Promise((resolve) => {
    $('login-form').onsubmit = (ev) => {
      ev.preventDefault();
      const value = input.value.trim();
      // What an HTTP header can carry; anything else would fail before it is sent.
      if (!/^[\x21-\x7e]+$/.test(value)) {
        error.textContent = 'A key or token is printable ASCII without spaces.';
        return;
      }
      credential.set(value);
      dialog.close();
      resolve();
    };
  });
}

function currentSession() {
  const m = /^#\/sessions\/(.+)$/.exec(location.hash);
  return m ? decodeURIComponent(m[1]) : null;
}

async function main() {
  onCredentialNeeded(askCredential);
  // Escape closes a modal dialog; this one must be answered.
  $('login').addEventListener('cancel', (ev) => ev.preventDefault());
  let bootstrap;
  try {
    bootstrap = await call('GetAgentUiBootstrap', {});
  } catch (e) {
    replace($('main'), h('div', { class: 'welcome' }, h('h2', {}, 'Tether is not answering'), h('p', { class: 'error' }, e.message)));
    return;
  }
  const agent = bootstrap.Agent;
  replace(
    $('agent-info'),
    h('div', { class: 'agent-name' }, agent.Name),
    h('div', { class: 'muted small' }, `${agent.Protocol} · Tether ${bootstrap.TetherVersion}`),
    h('div', { class: 'muted small account' }, `account ${bootstrap.AccountId}`),
  );
  $('sign-out').hidden = !credential.get();
  $('sign-out').onclick = () => {
    credential.clear();
    location.reload();
  };

  const sessions = new SessionList({ list: $('session-list'), search: $('session-search'), pager: $('pager'), current: currentSession });
  let view = null;
  const refreshList = () => sessions.refresh().catch(() => {});
  const route = () => {
    view?.close();
    view = new SessionView($('main'), { bootstrap, sessionId: currentSession(), onChange: refreshList });
    view.start();
    sessions.draw();
  };
  $('new-session').onclick = () => {
    if (location.hash === '#/' || location.hash === '') route();
    else location.hash = '#/';
  };
  window.addEventListener('hashchange', route);
  route();
  await refreshList();
  // Other clients start sessions too: keep the list current while the page is shown.
  setInterval(() => document.visibilityState === 'visible' && refreshList(), 5000);
}

main();
