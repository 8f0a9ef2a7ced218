/**
 * Where is `qvr-lsp`?  The lookup order is the setting `qvr.server.path`, then the
 * workspace folders' `.venv`, then `PATH`.
 *
 * This module deliberately does not import `vscode`: it is plain data in, plain data out,
 * so the unit tests run it with node alone (VS Code itself cannot be downloaded in CI).
 */
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';

export const SERVER_NAME = 'qvr-lsp';

export interface ServerLookup {
  /** The `qvr.server.path` setting; empty means "search". */
  configuredPath: string;
  /** File-system paths of the workspace folders, in order. */
  workspaceFolders: readonly string[];
  /** The environment whose `PATH` (and on Windows `PATHEXT`) is searched. */
  env: NodeJS.ProcessEnv;
  platform?: NodeJS.Platform;
}

export type ServerLocation =
  | { found: true; command: string; source: 'setting' | 'venv' | 'path' }
  | { found: false; message: string };

export function isExecutableFile(file: string, platform: NodeJS.Platform = process.platform): boolean {
  try {
    if (!fs.statSync(file).isFile()) {
      return false;
    }
    if (platform !== 'win32') {
      fs.accessSync(file, fs.constants.X_OK);
    }
    return true;
  } catch {
    return false;
  }
}

/** Expands `~` and `${workspaceFolder}`; a relative path is taken from `folder`. */
export function expandPath(p: string, folder: string | undefined): string {
  let out = p.trim();
  if (folder !== undefined) {
    out = out.split('${workspaceFolder}').join(folder);
  }
  if (out === '~' || out.startsWith('~/') || out.startsWith('~\\')) {
    out = path.join(os.homedir(), out.slice(1));
  }
  if (!path.isAbsolute(out) && folder !== undefined) {
    out = path.join(folder, out);
  }
  return out;
}

/** `.venv/bin/NAME` of `folder` (`.venv\\Scripts\\NAME.exe` on Windows): the one place the
 * virtual-environment layout is spelled out (the server and the dashboard's `qvr` use it). */
export function venvExecutablePath(folder: string, name: string,
  platform: NodeJS.Platform = process.platform): string {
  return platform === 'win32'
    ? path.join(folder, '.venv', 'Scripts', `${name}.exe`)
    : path.join(folder, '.venv', 'bin', name);
}

export function venvServerPath(folder: string, platform: NodeJS.Platform = process.platform): string {
  return venvExecutablePath(folder, SERVER_NAME, platform);
}

export function findOnPath(
  name: string,
  env: NodeJS.ProcessEnv,
  platform: NodeJS.Platform = process.platform,
): string | undefined {
  const dirs = (env.PATH ?? env.Path ?? '').split(platform === 'win32' ? ';' : ':').filter((d) => d !== '');
  const exts = platform === 'win32' ? (env.PATHEXT ?? '.EXE;.CMD;.BAT').split(';') : [''];
  for (const dir of dirs) {
    for (const ext of exts) {
      const candidate = path.join(dir, name + ext.toLowerCase());
      if (isExecutableFile(candidate, platform)) {
        return candidate;
      }
    }
  }
  return undefined;
}

/** How to find one executable: its name, the setting that may name it, and the message
 * when it is nowhere (given the `.venv` paths searched). */
export interface ExecutableSpec {
  name: string;
  setting: string;
  notFound: (searched: string[]) => string;
}

/** The setting, else `.venv/bin/NAME` of a workspace folder, else NAME on PATH. */
export function locateExecutable(spec: ExecutableSpec, lookup: ServerLookup): ServerLocation {
  const platform = lookup.platform ?? process.platform;
  const first = lookup.workspaceFolders[0];
  const venv = (folder: string) => venvExecutablePath(folder, spec.name, platform);
  if (lookup.configuredPath.trim() !== '') {
    const configured = expandPath(lookup.configuredPath, first);
    if (isExecutableFile(configured, platform)) {
      return { found: true, command: configured, source: 'setting' };
    }
    // A bare command name in the setting ("qvr-lsp", "my-wrapper") is looked up on PATH.
    if (!/[\\/]/.test(lookup.configuredPath)) {
      const onPath = findOnPath(lookup.configuredPath.trim(), lookup.env, platform);
      if (onPath !== undefined) {
        return { found: true, command: onPath, source: 'setting' };
      }
    }
    return {
      found: false,
      message:
        `QVR: the setting ${spec.setting} is "${lookup.configuredPath}", but there is no executable ` +
        `file at ${configured}. Correct the setting, or clear it to use the workspace's ` +
        `.venv/bin/${spec.name} or ${spec.name} on PATH.`,
    };
  }
  for (const folder of lookup.workspaceFolders) {
    const candidate = venv(folder);
    if (isExecutableFile(candidate, platform)) {
      return { found: true, command: candidate, source: 'venv' };
    }
  }
  const onPath = findOnPath(spec.name, lookup.env, platform);
  if (onPath !== undefined) {
    return { found: true, command: onPath, source: 'path' };
  }
  return { found: false, message: spec.notFound(lookup.workspaceFolders.map(venv)) };
}

export function locateServer(lookup: ServerLookup): ServerLocation {
  return locateExecutable({
    name: SERVER_NAME,
    setting: 'qvr.server.path',
    notFound: (searched) =>
      `QVR: cannot find the language server ${SERVER_NAME} ` +
      `(looked in ${[...searched, 'PATH'].join(', ')}). ` +
      `Install the QVR toolchain with its "lsp" extra into the workspace's .venv ` +
      `(python3 -m venv .venv && .venv/bin/pip install "qvr[lsp]"; in the qvr repository: ` +
      `bash scripts/setup.sh), put ${SERVER_NAME} on PATH, or set qvr.server.path. ` +
      `Then run "QVR: Restart Language Server". Highlighting works without the server.`,
  }, lookup);
}
