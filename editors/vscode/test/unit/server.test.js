// Unit tests of the qvr-lsp lookup (src/server.ts, compiled to out/server.js).
// Run after `npm run compile`: node --test test/unit/*.test.js
'use strict';
const { test } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { locateServer, expandPath, venvServerPath, SERVER_NAME } = require('../../out/server.js');

function tmpdir() {
  return fs.mkdtempSync(path.join(os.tmpdir(), 'qvr-ext-'));
}

function executable(file, mode = 0o755) {
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, '#!/bin/sh\n');
  fs.chmodSync(file, mode);
  return file;
}

const posix = { platform: 'linux' };

test('the workspace .venv comes first, before PATH', () => {
  const ws = tmpdir();
  const bin = tmpdir();
  const venv = executable(path.join(ws, '.venv', 'bin', SERVER_NAME));
  executable(path.join(bin, SERVER_NAME));
  const loc = locateServer({ configuredPath: '', workspaceFolders: [ws], env: { PATH: bin }, ...posix });
  assert.deepEqual(loc, { found: true, command: venv, source: 'venv' });
});

test('the first workspace folder with a .venv server wins', () => {
  const [a, b, c] = [tmpdir(), tmpdir(), tmpdir()];
  const inB = executable(path.join(b, '.venv', 'bin', SERVER_NAME));
  executable(path.join(c, '.venv', 'bin', SERVER_NAME));
  const loc = locateServer({ configuredPath: '', workspaceFolders: [a, b, c], env: { PATH: '' }, ...posix });
  assert.equal(loc.command, inB);
});

test('PATH is searched when no .venv has the server', () => {
  const ws = tmpdir();
  const empty = tmpdir();
  const bin = tmpdir();
  const onPath = executable(path.join(bin, SERVER_NAME));
  const loc = locateServer({ configuredPath: '', workspaceFolders: [ws], env: { PATH: `${empty}:${bin}` }, ...posix });
  assert.deepEqual(loc, { found: true, command: onPath, source: 'path' });
});

test('a file that is not executable is skipped', () => {
  const ws = tmpdir();
  const bin = tmpdir();
  executable(path.join(ws, '.venv', 'bin', SERVER_NAME), 0o644);
  const onPath = executable(path.join(bin, SERVER_NAME));
  const loc = locateServer({ configuredPath: '', workspaceFolders: [ws], env: { PATH: bin }, ...posix });
  assert.equal(loc.command, onPath);
});

test('qvr.server.path wins and is expanded', () => {
  const ws = tmpdir();
  const tool = executable(path.join(ws, 'tools', 'lsp'));
  executable(path.join(ws, '.venv', 'bin', SERVER_NAME));
  for (const setting of [tool, 'tools/lsp', '${workspaceFolder}/tools/lsp']) {
    const loc = locateServer({ configuredPath: setting, workspaceFolders: [ws], env: { PATH: '' }, ...posix });
    assert.deepEqual(loc, { found: true, command: tool, source: 'setting' }, setting);
  }
  assert.equal(expandPath('~/x/qvr-lsp', ws), path.join(os.homedir(), 'x', 'qvr-lsp'));
});

test('a bare command name in qvr.server.path is looked up on PATH', () => {
  const bin = tmpdir();
  const wrapper = executable(path.join(bin, 'qvr-lsp-wrapper'));
  const loc = locateServer({ configuredPath: 'qvr-lsp-wrapper', workspaceFolders: [tmpdir()], env: { PATH: bin }, ...posix });
  assert.deepEqual(loc, { found: true, command: wrapper, source: 'setting' });
});

test('a wrong qvr.server.path is reported, not silently replaced', () => {
  const ws = tmpdir();
  executable(path.join(ws, '.venv', 'bin', SERVER_NAME));
  const loc = locateServer({ configuredPath: '/nowhere/qvr-lsp', workspaceFolders: [ws], env: { PATH: '' }, ...posix });
  assert.equal(loc.found, false);
  assert.match(loc.message, /qvr\.server\.path/);
  assert.match(loc.message, /\/nowhere\/qvr-lsp/);
});

test('when nothing is found the message says where it looked and what to do', () => {
  const ws = tmpdir();
  const loc = locateServer({ configuredPath: '', workspaceFolders: [ws], env: { PATH: tmpdir() }, ...posix });
  assert.equal(loc.found, false);
  assert.ok(loc.message.includes(path.join(ws, '.venv', 'bin', SERVER_NAME)), loc.message);
  for (const hint of ['PATH', 'qvr[lsp]', 'qvr.server.path', 'Restart Language Server']) {
    assert.ok(loc.message.includes(hint), `${hint} missing from: ${loc.message}`);
  }
});

test('Windows layout: .venv\\Scripts\\qvr-lsp.exe', () => {
  assert.equal(venvServerPath('ws', 'win32'), path.join('ws', '.venv', 'Scripts', 'qvr-lsp.exe'));
  assert.equal(venvServerPath('ws', 'linux'), path.join('ws', '.venv', 'bin', 'qvr-lsp'));
});
