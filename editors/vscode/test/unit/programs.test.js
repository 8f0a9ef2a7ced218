// Where the "Fit with SVI · NUTS · SMC" code lenses go (src/programs.ts).
// Run after `npm run compile`: node --test test/unit/*.test.js
'use strict';
const { test } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { exportedPrograms, blankComments } = require('../../out/programs.js');

// Two exported programs, an exported morphism (the first export), a program that is not
// exported, and look-alikes in comments and strings that must not count.
const SAMPLE = [
  '## Two regimes.', //                                         0
  'object Point : Real 1', //                                   1
  'morphism noise : Point -> Point [role=kernel] ~ Normal(0.0, 1.0)', // 2
  'program gaussian_mixture : Point -> Point', //               3
  '    sample x <- noise', //                                   4
  '    return x', //                                            5
  '#{ program commented_out : Point -> Point', //               6
  '   export commented_out }#', //                              7
  'program  faulty_sensor(scale : Real) : Point -> Point  # two spaces', // 8
  '    return x', //                                            9
  'program helper : Point -> Point', //                         10
  '    return x', //                                            11
  '# export helper', //                                         12
  'export noise', //                                            13
  'export gaussian_mixture   # the model', //                   14
  'export faulty_sensor', //                                    15
  'export gaussian_mixture', //                                 16 (twice: QVR710, one lens)
  'export noise >> helper', //                                  17 (an expression export)
  '',
].join('\n');

test('lenses go on the declarations of the exported programs only', () => {
  assert.deepEqual(exportedPrograms(SAMPLE), [
    { name: 'gaussian_mixture', line: 3, start: 8, end: 24, primary: false },
    { name: 'faulty_sensor', line: 8, start: 9, end: 22, primary: false },
  ]);
});

test('the first export is the primary one (fitted without --export)', () => {
  const text = 'program a : X -> X\n    return x\nprogram b : X -> X\n    return x\nexport b\nexport a\n';
  assert.deepEqual(exportedPrograms(text).map((p) => [p.name, p.line, p.primary]), [['a', 0, false], ['b', 2, true]]);
});

test('CRLF line ends and a name that is a prefix of another', () => {
  const text = 'program p : X -> X\r\n    return x\r\nprogram p2 : X -> X\r\n    return x\r\nexport p2\r\n';
  assert.deepEqual(exportedPrograms(text), [{ name: 'p2', line: 2, start: 8, end: 10, primary: true }]);
});

test('comments and strings are blanked, line breaks and pragmas kept', () => {
  const text = 'a "x # y" # c\n#[pragma] #{ b\nc }# d ## e\n#![inner]';
  const blanked = blankComments(text);
  assert.equal(blanked, 'a "     "    \n#[pragma]     \n     d     \n#![inner]');
  assert.equal(blanked.length, text.length);
});

test('every exported program of the examples gets a lens', () => {
  const dir = process.env.QVR_EXAMPLES ?? path.join(__dirname, '..', '..', '..', '..', 'examples');
  const files = fs.readdirSync(dir).filter((f) => f.endsWith('.qvr'));
  assert.ok(files.length >= 10, dir);
  let total = 0;
  for (const file of files) {
    const text = fs.readFileSync(path.join(dir, file), 'utf8');
    const lines = text.split('\n');
    for (const program of exportedPrograms(text)) {
      total += 1;
      assert.match(lines[program.line], new RegExp(`^program\\s+${program.name}\\b`), file);
      assert.equal(lines[program.line].slice(program.start, program.end), program.name, file);
      assert.match(text, new RegExp(`^export ${program.name}\\s*$`, 'm'), file);
    }
  }
  assert.ok(total >= 15, `only ${total} exported programs found in the examples`);
});
