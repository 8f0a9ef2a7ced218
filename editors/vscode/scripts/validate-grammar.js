// Validates a TextMate grammar: the JSON parses, has the required keys, every
// `#include` resolves, and every regex compiles with Oniguruma 2.x (1.x, which
// vscode-tmgrammar-test bundles, silently accepts some broken patterns).
// Usage: node scripts/validate-grammar.js syntaxes/qvr.tmLanguage.json
'use strict';
const fs = require('fs');
const path = require('path');
const onig = require('vscode-oniguruma');

async function main(file) {
  const grammar = JSON.parse(fs.readFileSync(file, 'utf8'));
  const errors = [];
  for (const key of ['scopeName', 'patterns', 'repository']) {
    if (!(key in grammar)) errors.push(`missing "${key}"`);
  }
  const wasm = fs.readFileSync(require.resolve('vscode-oniguruma/release/onig.wasm'));
  await onig.loadWASM(wasm.buffer.slice(wasm.byteOffset, wasm.byteOffset + wasm.byteLength));
  const repository = grammar.repository || {};
  const used = new Set();

  const walk = (node, where) => {
    if (Array.isArray(node)) return node.forEach((child, i) => walk(child, `${where}[${i}]`));
    if (!node || typeof node !== 'object') return;
    for (const key of ['match', 'begin', 'end', 'while']) {
      if (typeof node[key] === 'string') {
        try {
          new onig.OnigScanner([node[key]]).dispose();
        } catch (e) {
          errors.push(`${where}.${key}: bad regex ${JSON.stringify(node[key])}: ${e.message}`);
        }
      }
    }
    if ('begin' in node && !('end' in node) && !('while' in node)) errors.push(`${where}: begin without end`);
    if (typeof node.include === 'string' && node.include.startsWith('#')) {
      const name = node.include.slice(1);
      used.add(name);
      if (!(name in repository)) errors.push(`${where}: include ${node.include} is not in the repository`);
    }
    for (const [key, value] of Object.entries(node)) if (typeof value === 'object') walk(value, `${where}.${key}`);
  };
  walk(grammar, path.basename(file));
  for (const name of Object.keys(repository)) {
    if (!used.has(name)) errors.push(`repository.${name} is never included`);
  }
  if (errors.length) {
    console.error(errors.join('\n'));
    process.exit(1);
  }
  console.log(`${file}: OK (${grammar.scopeName}, ${Object.keys(repository).length} repository rules)`);
}

main(process.argv[2]).catch((e) => {
  console.error(String(e));
  process.exit(1);
});
