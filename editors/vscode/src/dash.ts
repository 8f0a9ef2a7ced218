/**
 * The command line of `qvr dash`: which `qvr` to run, with which arguments, from which
 * folder, and how that reads when written out for a POSIX shell.
 *
 * Like server.ts this module does not import `vscode`: plain data in, plain data out, so
 * the node unit tests check the exact command line for every method and awkward paths.
 */
import * as path from 'path';
import { locateExecutable, venvExecutablePath } from './server';

export const CLI_NAME = 'qvr';

/** The methods `qvr dash --start` accepts, in the order the editors offer them. */
export const METHODS = ['svi', 'hmc', 'nuts', 'smc'] as const;
export type Method = (typeof METHODS)[number];

/** The methods that get a code lens above each exported program (HMC is in the command). */
export const LENS_METHODS: readonly Method[] = ['svi', 'nuts', 'smc'];

export const METHOD_LABELS: Record<Method, string> = { svi: 'SVI', hmc: 'HMC', nuts: 'NUTS', smc: 'SMC' };

export function isMethod(value: unknown): value is Method {
  return typeof value === 'string' && (METHODS as readonly string[]).includes(value);
}

export interface DashRequest {
  /** File-system path of the `.qvr` file. */
  file: string;
  /** Start this fit as soon as the dashboard opens; without it the dashboard only opens. */
  method?: Method;
  /** The exported program to fit (`--export NAME`); the file's first export when absent. */
  exportName?: string;
}

export interface DashCommand {
  /** The `qvr` executable, run directly (no shell in between, so nothing to quote). */
  command: string;
  args: string[];
  /** Where the terminal starts: the workspace folder holding the file, else its folder. */
  cwd: string;
}

/**
 * The arguments after `qvr`: `dash FILE [--start M] [--export NAME]` (`qvr dash` fits the
 * file's first export unless `--export` names another).
 */
export function dashArgs(request: DashRequest): string[] {
  if (request.method !== undefined && !isMethod(request.method)) {
    throw new RangeError(`unknown method ${JSON.stringify(request.method)}: expected one of ${METHODS.join(', ')}`);
  }
  const args = ['dash', request.file];
  if (request.method !== undefined) {
    args.push('--start', request.method);
  }
  if (request.exportName !== undefined) {
    args.push('--export', request.exportName);
  }
  return args;
}

/** The workspace folder that contains `file` (the deepest one), else the file's folder. */
export function workingFolder(file: string, workspaceFolders: readonly string[]): string {
  const containing = workspaceFolders
    .filter((folder) => {
      const relative = path.relative(folder, file);
      return relative !== '' && !relative.startsWith('..') && !path.isAbsolute(relative);
    })
    .sort((a, b) => b.length - a.length);
  return containing[0] ?? path.dirname(file);
}

export function dashCommand(executable: string, request: DashRequest, workspaceFolders: readonly string[]): DashCommand {
  return { command: executable, args: dashArgs(request), cwd: workingFolder(request.file, workspaceFolders) };
}

/** `arg` quoted for a POSIX shell: bare when it is only safe characters, else in single quotes. */
export function shellQuote(arg: string): string {
  if (arg !== '' && /^[A-Za-z0-9_@%+=:,./-]+$/.test(arg)) {
    return arg;
  }
  return `'${arg.split("'").join(`'\\''`)}'`;
}

/** The command as one line a user can paste into a POSIX shell. */
export function commandLine(command: DashCommand): string {
  return [command.command, ...command.args].map(shellQuote).join(' ');
}

// ------------------------------------------------------------------ finding `qvr`

export interface CliLookup {
  /** The `qvr.cli.path` setting; empty means "search". */
  configuredPath: string;
  /** Workspace folders to search for `.venv`, the one holding the file first. */
  workspaceFolders: readonly string[];
  env: NodeJS.ProcessEnv;
  platform?: NodeJS.Platform;
}

export type CliLocation =
  | { found: true; command: string; source: 'setting' | 'venv' | 'path' }
  | { found: false; message: string };

export function venvCliPath(folder: string, platform: NodeJS.Platform = process.platform): string {
  return venvExecutablePath(folder, CLI_NAME, platform);
}

/** The setting `qvr.cli.path`, else `.venv/bin/qvr` of a workspace folder, else `qvr` on PATH. */
export function locateCli(lookup: CliLookup): CliLocation {
  return locateExecutable({
    name: CLI_NAME,
    setting: 'qvr.cli.path',
    notFound: (searched) =>
      `QVR: cannot find the ${CLI_NAME} command for the dashboard ` +
      `(looked in ${[...searched, 'PATH'].join(', ')}). ` +
      `Install the QVR toolchain with its "tui" and "runtime" extras into the workspace's .venv ` +
      `(python3 -m venv .venv && .venv/bin/pip install "qvr[tui,runtime]"; in the qvr repository: ` +
      `bash scripts/setup.sh), put ${CLI_NAME} on PATH, or set qvr.cli.path.`,
  }, lookup);
}
