// Checks language-configuration.json: every regex compiles as the JavaScript RegExp
// VS Code builds from it, and the indentation rules agree with the indentation of
// every example program (examples/, or the folder in QVR_EXAMPLES).
'use strict';
const { test } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');

const config = require('../../language-configuration.json');
const EXAMPLES = process.env.QVR_EXAMPLES || path.join(__dirname, '..', '..', '..', '..', 'examples');
const increase = new RegExp(config.indentationRules.increaseIndentPattern);
const decrease = new RegExp(config.indentationRules.decreaseIndentPattern);

function examples() {
  const files = fs.readdirSync(EXAMPLES).filter((f) => f.endsWith('.qvr'));
  assert.ok(files.length > 0, `no examples in ${EXAMPLES}`);
  return files.map((f) => ({ name: f, lines: fs.readFileSync(path.join(EXAMPLES, f), 'utf8').split('\n') }));
}

const indentOf = (line) => line.length - line.trimStart().length;
const isCode = (line) => line.trim() !== '' && !line.trimStart().startsWith('#');

test('comments and brackets', () => {
  assert.deepEqual(config.comments, { lineComment: '#', blockComment: ['#{', '}#'] });
  assert.deepEqual(config.brackets, [['(', ')'], ['[', ']'], ['{', '}']]);
  const closers = Object.fromEntries(config.autoClosingPairs.map((p) => [p.open, p.close]));
  assert.deepEqual(closers, { '(': ')', '[': ']', '{': '}', '"': '"' });
});

test('all patterns compile', () => {
  new RegExp(config.wordPattern);
  new RegExp(config.folding.markers.start);
  new RegExp(config.folding.markers.end);
  for (const rule of config.onEnterRules) new RegExp(rule.beforeText);
});

test('the word pattern covers names and numbers', () => {
  const word = new RegExp(`^(?:${config.wordPattern})$`);
  for (const w of ['head_0', '_', 'FinSet', '32', '0.5', '1.5e-3', '1e-5']) assert.ok(word.test(w), w);
  for (const w of ['>>', 'a.b', '1.']) assert.ok(!word.test(w), w);
});

test('block headers increase the indent, other lines do not', () => {
  for (const line of [
    'program transformer_lm : Token -> Token',
    'program site_effects(centre : Real, spread : Real) : Site -> Site',
    'deduction Arith : Item -> Item [semiring=Viterbi, start=E, depth=5]',
    '    marginalize seg : Segment <- Categorical(share) [over=Customer]',
    '    lexicon',
    '    lexicon   # axioms',
    'morphism probe : Cell -> Hidden [',
    '    let t = factor b : Band in {',
  ]) {
    assert.ok(increase.test(line), line);
  }
  for (const line of [
    'object Token : FinSet 32',
    'morphism head : Latent -> HeadOut [role=kernel, replicate=4, scale=0.1] ~ Normal',
    'let backbone = tok_embed >> stack(layer, 2)',
    '    sample h <- backbone',
    '    observe next_token : Token <- lm_head(h)',
    '    rule add : span(I, K, E) |- span(I, J, E) #[learnable]',
    '    return next_token',
    '# program in a comment',
  ]) {
    assert.ok(!increase.test(line), line);
  }
  assert.ok(decrease.test(']') && decrease.test('    )') && !decrease.test('    return x'));
});

test('the indentation rules agree with every example', () => {
  for (const { name, lines } of examples()) {
    const code = lines.map((text, i) => ({ text, no: i + 1 })).filter(({ text }) => isCode(text));
    for (let i = 0; i + 1 < code.length; i++) {
      const here = code[i];
      const next = code[i + 1];
      const opens = indentOf(next.text) > indentOf(here.text);
      assert.equal(increase.test(here.text), opens,
        `${name}:${here.no}: ${opens ? 'opens a block but is not' : 'is not a block header but is'} ` +
        `matched by increaseIndentPattern: ${here.text}`);
    }
  }
});

test('Enter continues doc comments and leaves a program after return', () => {
  const on = (line) => config.onEnterRules.find((r) => new RegExp(r.beforeText).test(line));
  assert.equal(on('## Hours of the day').action.appendText, '## ');
  assert.equal(on('#! Hours of the day').action.appendText, '#! ');
  assert.equal(on('#![pragma]'), undefined);
  assert.equal(on('# plain comment'), undefined);
  assert.equal(on('    return next_token').action.indent, 'outdent');
});
