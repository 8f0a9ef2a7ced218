// Unit tests of the `qvr dash` command line (src/dash.ts, compiled to out/dash.js).
// Run after `npm run compile`: node --test test/unit/*.test.js
'use strict';
const { test } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const {
  METHODS, dashArgs, dashCommand, commandLine, shellQuote, workingFolder, locateCli, venvCliPath, CLI_NAME,
} = require('../../out/dash.js');

function tmpdir() {
  return fs.mkdtempSync(path.join(os.tmpdir(), 'qvr-dash-'));
}

function executable(file, mode = 0o755) {
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, '#!/bin/sh\n');
  fs.chmodSync(file, mode);
  return file;
}

const QVR = '/ws/.venv/bin/qvr';

test('the methods are the four of qvr dash --start', () => {
  assert.deepEqual([...METHODS], ['svi', 'hmc', 'nuts', 'smc']);
});

test('a plain path: qvr dash FILE, and --start M for each method', () => {
  const file = '/ws/models/lm.qvr';
  assert.deepEqual(dashCommand(QVR, { file }, ['/ws']), { command: QVR, args: ['dash', file], cwd: '/ws' });
  for (const method of METHODS) {
    const command = dashCommand(QVR, { file, method }, ['/ws']);
    assert.deepEqual(command.args, ['dash', file, '--start', method]);
    assert.equal(commandLine(command), `/ws/.venv/bin/qvr dash /ws/models/lm.qvr --start ${method}`);
  }
});

test('a path with spaces stays one argument and is quoted in the command line', () => {
  const file = '/home/ann/my models/gaussian mixture.qvr';
  const command = dashCommand('/home/ann/my models/.venv/bin/qvr', { file, method: 'nuts' }, ['/home/ann/my models']);
  assert.deepEqual(command.args, ['dash', file, '--start', 'nuts']);
  assert.equal(command.cwd, '/home/ann/my models');
  assert.equal(
    commandLine(command),
    "'/home/ann/my models/.venv/bin/qvr' dash '/home/ann/my models/gaussian mixture.qvr' --start nuts",
  );
});

test('shell quoting survives quotes, dollars and empty strings', () => {
  assert.equal(shellQuote("it's $HOME/`x`.qvr"), `'it'\\''s $HOME/\`x\`.qvr'`);
  assert.equal(shellQuote(''), "''");
  assert.equal(shellQuote('a-b_c.d/e:f=g,h@i+%'), 'a-b_c.d/e:f=g,h@i+%');
  // round trip through a real POSIX shell: each argument comes back unchanged
  const awkward = ['dash', "/tmp/it's here/a b.qvr", '$HOME', '`id`', 'x"y', '*', ''];
  const { execFileSync } = require('node:child_process');
  const printed = execFileSync('/bin/sh', ['-c', `printf '%s\\0' ${awkward.map(shellQuote).join(' ')}`]).toString();
  assert.deepEqual(printed.split('\0').slice(0, -1), awkward);
});

test('an export other than the first is named with --export', () => {
  assert.deepEqual(dashArgs({ file: '/ws/m.qvr', method: 'svi', exportName: 'faulty_sensor' }),
    ['dash', '/ws/m.qvr', '--start', 'svi', '--export', 'faulty_sensor']);
  assert.deepEqual(dashArgs({ file: '/ws/m.qvr', method: 'svi' }), ['dash', '/ws/m.qvr', '--start', 'svi']);
});

test('an unknown method is refused with the list of methods', () => {
  assert.throws(() => dashArgs({ file: '/ws/m.qvr', method: 'mcmc' }),
    { name: 'RangeError', message: 'unknown method "mcmc": expected one of svi, hmc, nuts, smc' });
});

test('the terminal starts in the deepest workspace folder holding the file, else its folder', () => {
  assert.equal(workingFolder('/ws/a/m.qvr', ['/other', '/ws', '/ws/a']), '/ws/a');
  assert.equal(workingFolder('/ws/m.qvr', ['/ws/a', '/ws']), '/ws');
  assert.equal(workingFolder('/wsx/m.qvr', ['/ws']), '/wsx'); // a sibling, not inside
  assert.equal(workingFolder('/tmp/loose/m.qvr', []), '/tmp/loose');
});

const posix = { platform: 'linux' };

test('qvr is found in the workspace .venv first, then on PATH', () => {
  const ws = tmpdir();
  const bin = tmpdir();
  const onPath = executable(path.join(bin, CLI_NAME));
  assert.deepEqual(locateCli({ configuredPath: '', workspaceFolders: [ws], env: { PATH: bin }, ...posix }),
    { found: true, command: onPath, source: 'path' });
  const venv = executable(path.join(ws, '.venv', 'bin', CLI_NAME));
  assert.deepEqual(locateCli({ configuredPath: '', workspaceFolders: [ws], env: { PATH: bin }, ...posix }),
    { found: true, command: venv, source: 'venv' });
});

test('qvr.cli.path wins; a wrong one is reported', () => {
  const ws = tmpdir();
  executable(path.join(ws, '.venv', 'bin', CLI_NAME));
  const tool = executable(path.join(ws, 'tools', 'qvr'));
  assert.deepEqual(locateCli({ configuredPath: 'tools/qvr', workspaceFolders: [ws], env: { PATH: '' }, ...posix }),
    { found: true, command: tool, source: 'setting' });
  const wrong = locateCli({ configuredPath: '/nowhere/qvr', workspaceFolders: [ws], env: { PATH: '' }, ...posix });
  assert.equal(wrong.found, false);
  assert.match(wrong.message, /qvr\.cli\.path is "\/nowhere\/qvr"/);
});

test('when qvr is nowhere the message says where it looked and what to install', () => {
  const ws = tmpdir();
  const loc = locateCli({ configuredPath: '', workspaceFolders: [ws], env: { PATH: tmpdir() }, ...posix });
  assert.equal(loc.found, false);
  for (const hint of [path.join(ws, '.venv', 'bin', 'qvr'), 'PATH', 'qvr[tui,runtime]', 'qvr.cli.path']) {
    assert.ok(loc.message.includes(hint), `${hint} missing from: ${loc.message}`);
  }
  assert.equal(venvCliPath('ws', 'win32'), path.join('ws', '.venv', 'Scripts', 'qvr.exe'));
});
