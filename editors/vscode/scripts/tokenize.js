// Tokenizes .qvr files with the extension's TextMate grammar, the way VS Code does
// (vscode-textmate + Oniguruma), and prints the result as JSON for the test suite:
//   {"<file>": [{"depth": <rule-stack depth before the line>,
//                "tokens": [[start, end, [scope, ...]], ...]}, ...]}
// Depth 1 means "at the top level": no begin/end region (string, bracket, comment,
// declaration header) is still open from an earlier line.
// Usage: node scripts/tokenize.js FILE.qvr...
'use strict';
const fs = require('fs');
const path = require('path');
const onig = require('vscode-oniguruma');
const vsctm = require('vscode-textmate');

const GRAMMAR = path.join(__dirname, '..', 'syntaxes', 'qvr.tmLanguage.json');

async function main(files) {
  const wasm = fs.readFileSync(require.resolve('vscode-oniguruma/release/onig.wasm'));
  await onig.loadWASM(wasm.buffer.slice(wasm.byteOffset, wasm.byteOffset + wasm.byteLength));
  const registry = new vsctm.Registry({
    onigLib: Promise.resolve({
      createOnigScanner: (patterns) => new onig.OnigScanner(patterns),
      createOnigString: (s) => new onig.OnigString(s),
    }),
    loadGrammar: async (scopeName) =>
      scopeName === 'source.qvr' ? vsctm.parseRawGrammar(fs.readFileSync(GRAMMAR, 'utf8'), GRAMMAR) : null,
  });
  const grammar = await registry.loadGrammar('source.qvr');
  const out = {};
  for (const file of files) {
    const lines = fs.readFileSync(file, 'utf8').replace(/\r\n/g, '\n').split('\n');
    let state = vsctm.INITIAL;
    out[file] = lines.map((line) => {
      // `depth` is not in vscode-textmate's typings but is a stable field of its StateStack.
      const depth = state === vsctm.INITIAL ? 1 : state.depth;
      const result = grammar.tokenizeLine(line, state);
      state = result.ruleStack;
      return { depth, tokens: result.tokens.map((t) => [t.startIndex, Math.min(t.endIndex, line.length), t.scopes]) };
    });
  }
  process.stdout.write(JSON.stringify(out));
}

main(process.argv.slice(2)).catch((e) => {
  console.error(e);
  process.exit(1);
});
