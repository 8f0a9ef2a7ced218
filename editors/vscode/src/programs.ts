/**
 * The exported programs of a QVR document, read from its text: where the "Fit with
 * SVI · NUTS · SMC" code lenses can go (dashboard.ts puts them on the primary one).
 *
 * A program is exported when a top-level `export NAME` names a `program NAME` of the
 * same file. This needs no language server (the lenses appear while the server starts,
 * or without it) and no full parse: top-level statements start in column 0 (language
 * spec 2.1), so a line scan over the text with comments and strings blanked out is
 * exact for these two statement forms. A file with errors still gets lenses for what
 * it declares; `qvr dash` reports the errors.
 *
 * No `vscode` import: the node unit tests run this module directly.
 */

const NAME = '[A-Za-z_][A-Za-z0-9_]*';
const PROGRAM = new RegExp(`^program[ \\t\\f]+(${NAME})(?![A-Za-z0-9_])`);
/** `export NAME` alone on its line; `export f >> g` exports an anonymous morphism. */
const EXPORT_NAME = new RegExp(`^export[ \\t\\f]+(${NAME})[ \\t\\f\\r]*$`);
const EXPORT = /^export(?![A-Za-z0-9_])/;

export interface ExportedProgram {
  name: string;
  /** 0-based line of the `program NAME` declaration. */
  line: number;
  /** 0-based columns of NAME on that line (UTF-16 code units, as VS Code counts). */
  start: number;
  end: number;
  /**
   * True when this program is the file's first export: what `qvr run` and `qvr dash`
   * fit when no `--export NAME` is given.
   */
  primary: boolean;
}

/**
 * `text` with comments and the insides of string literals replaced by spaces, line
 * breaks kept: what is left of a line is code only. Pragma openers `#[` and `#![` stay
 * (they are not comments).
 */
export function blankComments(text: string): string {
  const out: string[] = [];
  let i = 0;
  const n = text.length;
  const blank = (s: string) => s.replace(/[^\r\n]/g, ' ');
  while (i < n) {
    const c = text[i];
    if (c === '"') {
      let j = i + 1;
      while (j < n && text[j] !== '"' && text[j] !== '\n') {
        j += text[j] === '\\' && j + 1 < n && text[j + 1] !== '\n' ? 2 : 1;
      }
      out.push('"', blank(text.slice(i + 1, j)));
      if (j < n && text[j] === '"') {
        out.push('"');
        j += 1;
      }
      i = j;
    } else if (c === '#' && text[i + 1] === '[') {
      out.push('#[');
      i += 2;
    } else if (c === '#' && text[i + 1] === '!' && text[i + 2] === '[') {
      out.push('#![');
      i += 3;
    } else if (c === '#' && text[i + 1] === '{') {
      const end = text.indexOf('}#', i + 2);
      const stop = end < 0 ? n : end + 2;
      out.push(blank(text.slice(i, stop)));
      i = stop;
    } else if (c === '#') {
      let j = text.indexOf('\n', i);
      if (j < 0) {
        j = n;
      }
      out.push(blank(text.slice(i, j)));
      i = j;
    } else {
      out.push(c);
      i += 1;
    }
  }
  return out.join('');
}

/** Every exported program of the document, in the order of their declarations. */
export function exportedPrograms(text: string): ExportedProgram[] {
  const lines = blankComments(text).split('\n');
  const declared = new Map<string, { line: number; start: number }>();
  const exported: string[] = [];
  let first: string | null | undefined; // undefined: no export yet; null: not a plain name
  lines.forEach((line, number) => {
    const program = PROGRAM.exec(line);
    if (program !== null && !declared.has(program[1])) {
      declared.set(program[1], { line: number, start: line.indexOf(program[1], 'program'.length) });
    }
    if (EXPORT.test(line)) {
      const name = EXPORT_NAME.exec(line)?.[1] ?? null;
      if (first === undefined) {
        first = name;
      }
      if (name !== null && !exported.includes(name)) {
        exported.push(name);
      }
    }
  });
  const found: ExportedProgram[] = [];
  for (const name of exported) {
    const at = declared.get(name);
    if (at !== undefined) {
      found.push({ name, line: at.line, start: at.start, end: at.start + name.length, primary: name === first });
    }
  }
  return found.sort((a, b) => a.line - b.line);
}
