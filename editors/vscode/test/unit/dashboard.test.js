// The dashboard command and code lenses (src/dashboard.ts) against a stand-in for the
// `vscode` module: VS Code itself cannot be started here, but everything the extension
// asks of it (register commands and a code-lens provider, create a terminal, show an
// error) is recorded and checked. Run after `npm run compile`.
'use strict';
const { test, beforeEach } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const Module = require('node:module');

// ------------------------------------------------------------- the fake vscode module

class Uri {
  constructor(scheme, fsPath) {
    this.scheme = scheme;
    this.fsPath = fsPath;
    this.path = fsPath;
  }
  static file(p) {
    return new Uri('file', p);
  }
  toString() {
    return `${this.scheme}://${this.fsPath}`;
  }
}
class Range {
  constructor(l1, c1, l2, c2) {
    this.start = { line: l1, character: c1 };
    this.end = { line: l2, character: c2 };
  }
}
class CodeLens {
  constructor(range, command) {
    this.range = range;
    this.command = command;
  }
}
class ThemeIcon {
  constructor(id) {
    this.id = id;
  }
}

let state;
function reset() {
  state = { commands: new Map(), lenses: [], terminals: [], errors: [], editor: undefined, documents: [], folders: [], config: {} };
}
reset();

const vscode = {
  Uri, Range, CodeLens, ThemeIcon,
  commands: {
    registerCommand(id, fn) {
      assert.ok(!state.commands.has(id), `${id} registered twice`);
      state.commands.set(id, fn);
      return { dispose() {} };
    },
  },
  languages: {
    registerCodeLensProvider(selector, provider) {
      state.lenses.push({ selector, provider });
      return { dispose() {} };
    },
  },
  window: {
    get activeTextEditor() {
      return state.editor;
    },
    createTerminal(options) {
      const terminal = { options, shown: false, show() { this.shown = true; } };
      state.terminals.push(terminal);
      return terminal;
    },
    showErrorMessage(message) {
      state.errors.push(message);
      return Promise.resolve(undefined);
    },
  },
  workspace: {
    get textDocuments() {
      return state.documents;
    },
    get workspaceFolders() {
      return state.folders.map((f, index) => ({ uri: Uri.file(f), name: path.basename(f), index }));
    },
    getWorkspaceFolder(uri) {
      return this.workspaceFolders
        .filter((f) => uri.fsPath.startsWith(f.uri.fsPath + path.sep))
        .sort((a, b) => b.uri.fsPath.length - a.uri.fsPath.length)[0];
    },
    getConfiguration(section) {
      return { get: (key, fallback) => state.config[`${section}.${key}`] ?? fallback };
    },
  },
};

const resolve = Module._resolveFilename;
Module._resolveFilename = function (request, ...rest) {
  return request === 'vscode' ? 'vscode' : resolve.call(this, request, ...rest);
};
require.cache.vscode = { id: 'vscode', filename: 'vscode', loaded: true, exports: vscode };
const { registerDashboard } = require('../../out/dashboard.js');
const manifest = require('../../package.json');

// ------------------------------------------------------------------------- helpers

function executable(file) {
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, '#!/bin/sh\n');
  fs.chmodSync(file, 0o755);
  return file;
}

/** A workspace "my models" (with a space) holding `.venv/bin/qvr` and models/mix.qvr. */
function workspace() {
  const ws = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'qvr-dashboard-')), 'my models');
  const qvr = executable(path.join(ws, '.venv', 'bin', 'qvr'));
  const file = path.join(ws, 'models', 'gaussian mix.qvr');
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, SAMPLE);
  state.folders = [ws];
  return { ws, qvr, file };
}

function open(file, { dirty = false, languageId = 'qvr', scheme = 'file' } = {}) {
  const document = {
    uri: new Uri(scheme, file), languageId, isDirty: dirty, saved: 0,
    save() { this.saved += 1; this.isDirty = false; return Promise.resolve(true); },
    getText() { return SAMPLE; },
  };
  state.documents.push(document);
  state.editor = { document };
  return document;
}

const SAMPLE = [
  'object Point : Real 1',
  'morphism noise : Point -> Point [role=kernel] ~ Normal(0.0, 1.0)',
  'program gaussian_mixture : Point -> Point',
  '    sample x <- noise',
  '    return x',
  'program faulty_sensor : Point -> Point',
  '    return x',
  'export gaussian_mixture',
  'export faulty_sensor',
  'export noise',
  '',
].join('\n');

const logged = [];
beforeEach(() => {
  reset();
  logged.length = 0;
  registerDashboard({ subscriptions: [] }, (line) => logged.push(line));
});

const run = (id, ...args) => state.commands.get(id)(...args);

// --------------------------------------------------------------------------- tests

test('the commands contributed in package.json are registered, with a code-lens provider for qvr files', () => {
  const contributed = manifest.contributes.commands.map((c) => c.command);
  const ours = contributed.filter((c) => !['qvr.restartServer', 'qvr.showServerOutput'].includes(c));
  assert.deepEqual([...state.commands.keys()].sort(), ['qvr.fitNuts', 'qvr.fitSmc', 'qvr.fitSvi', 'qvr.openDashboard']);
  assert.deepEqual(ours.sort(), [...state.commands.keys()].sort());
  assert.deepEqual(state.lenses.map((l) => l.selector), [{ scheme: 'file', language: 'qvr' }]);
});

test('QVR: Open Dashboard with a method runs `qvr dash FILE --start M` in a terminal', async () => {
  const { ws, qvr, file } = workspace();
  open(file);
  for (const method of ['svi', 'hmc', 'nuts', 'smc']) {
    const terminal = await run('qvr.openDashboard', method);
    assert.equal(terminal, state.terminals.at(-1));
    assert.deepEqual(terminal.options.shellArgs, ['dash', file, '--start', method]);
  }
  const [first] = state.terminals;
  assert.equal(first.options.shellPath, qvr);
  assert.equal(first.options.cwd, ws);
  assert.equal(first.options.name, 'QVR Dashboard: gaussian mix.qvr');
  assert.equal(first.options.message, `$ '${qvr}' dash '${file}' --start svi`);
  assert.equal(first.options.isTransient, true);
  assert.ok(state.terminals.every((t) => t.shown));
  assert.deepEqual(state.errors, []);
  assert.equal(logged[0], `dashboard: '${qvr}' dash '${file}' --start svi (in ${ws})`);
});

test('from the palette (no argument) it opens the dashboard without starting a fit', async () => {
  const { file } = workspace();
  open(file);
  const terminal = await run('qvr.openDashboard');
  assert.deepEqual(terminal.options.shellArgs, ['dash', file]);
});

test('the fit commands start their method', async () => {
  const { file } = workspace();
  open(file);
  for (const [id, method] of [['qvr.fitSvi', 'svi'], ['qvr.fitNuts', 'nuts'], ['qvr.fitSmc', 'smc']]) {
    const terminal = await run(id);
    assert.deepEqual(terminal.options.shellArgs, ['dash', file, '--start', method], id);
  }
});

test('an explorer or editor-title menu passes the file Uri first', async () => {
  const { file } = workspace();
  const terminal = await run('qvr.openDashboard', Uri.file(file), [Uri.file(file)]);
  assert.deepEqual(terminal.options.shellArgs, ['dash', file]);
});

test('unsaved changes are saved first: the dashboard reads the file', async () => {
  const { file } = workspace();
  const document = open(file, { dirty: true });
  await run('qvr.fitNuts');
  assert.equal(document.saved, 1);
  assert.equal(state.terminals.length, 1);
});

test('code lenses: "Fit with SVI | NUTS | SMC" above each exported program, opening the dashboard', async () => {
  const { file } = workspace();
  const document = open(file);
  const lenses = state.lenses[0].provider.provideCodeLenses(document);
  // gaussian_mixture is the first export; faulty_sensor, exported second, is named with --export
  assert.deepEqual(
    lenses.map((l) => [l.range.start.line, l.range.start.character, l.range.end.character, l.command.title]),
    [[2, 8, 24, 'Fit with SVI'], [2, 8, 24, 'NUTS'], [2, 8, 24, 'SMC'],
      [5, 8, 21, 'Fit with SVI'], [5, 8, 21, 'NUTS'], [5, 8, 21, 'SMC']],
  );
  assert.ok(lenses.every((l) => l.command.command === 'qvr.openDashboard'));
  const args = [];
  for (const lens of lenses) {
    const terminal = await run(lens.command.command, ...lens.command.arguments);
    args.push(terminal.options.shellArgs);
  }
  assert.deepEqual(args, [
    ...['svi', 'nuts', 'smc'].map((m) => ['dash', file, '--start', m]),
    ...['svi', 'nuts', 'smc'].map((m) => ['dash', file, '--start', m, '--export', 'faulty_sensor']),
  ]);
});

test('when the first export is not a program, every program lens names its export', () => {
  const text = SAMPLE.replace('export gaussian_mixture\nexport faulty_sensor\nexport noise\n',
    'export noise\nexport gaussian_mixture\nexport faulty_sensor\n');
  assert.notEqual(text, SAMPLE);
  const document = { uri: Uri.file('/ws/m.qvr'), getText: () => text };
  const lenses = state.lenses[0].provider.provideCodeLenses(document);
  assert.deepEqual(lenses.map((l) => l.command.arguments[2]),
    ['gaussian_mixture', 'gaussian_mixture', 'gaussian_mixture',
      'faulty_sensor', 'faulty_sensor', 'faulty_sensor']);
});

test('what cannot be opened is said, and no terminal appears', async () => {
  const { file } = workspace();
  open(file);
  assert.equal(await run('qvr.openDashboard', 'mcmc'), undefined);
  assert.equal(state.errors.at(-1), 'QVR: unknown method "mcmc" for the dashboard; use one of svi, hmc, nuts, smc.');

  state.editor = undefined;
  assert.equal(await run('qvr.fitSvi'), undefined);
  assert.equal(state.errors.at(-1), 'QVR: open a .qvr file to show it in the dashboard.');

  open('Untitled-1', { scheme: 'untitled' });
  assert.equal(await run('qvr.fitSvi'), undefined);
  assert.equal(state.errors.at(-1), 'QVR: save Untitled-1 to disk first: the dashboard reads the file.');

  open(path.join(path.dirname(file), 'notes.txt'), { languageId: 'plaintext' });
  assert.equal(await run('qvr.fitSvi'), undefined);
  assert.equal(state.errors.at(-1), 'QVR: notes.txt is not a .qvr file.');

  state.config['qvr.cli.path'] = '/nowhere/qvr';
  open(file);
  assert.equal(await run('qvr.fitSvi'), undefined);
  assert.match(state.errors.at(-1), /^QVR: the setting qvr\.cli\.path is "\/nowhere\/qvr"/);
  assert.equal(state.terminals.length, 0);
  assert.deepEqual(logged, state.errors);
});
