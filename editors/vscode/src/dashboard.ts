/**
 * "QVR: Open Dashboard" and the "Fit with SVI · NUTS · SMC" code lenses: both open the
 * training dashboard `qvr dash FILE [--start METHOD]` in an integrated terminal.
 *
 * The terminal runs `qvr` itself (TerminalOptions.shellPath/shellArgs), not a command
 * line typed into the user's shell: the file path reaches `qvr` as one argument whatever
 * it contains and whichever shell (bash, fish, PowerShell, cmd) the user has, and the
 * dashboard's exit status shows in the terminal. The quoted command line is written at
 * the top of the terminal and to the output channel, for copying.
 *
 * What to run is decided in dash.ts and where the lenses go in programs.ts; this module
 * only translates between them and VS Code.
 */
import * as path from 'path';
import * as vscode from 'vscode';
import { LENS_METHODS, METHODS, METHOD_LABELS, Method, commandLine, dashCommand, isMethod, locateCli } from './dash';
import { exportedPrograms } from './programs';

export const OPEN_DASHBOARD = 'qvr.openDashboard';

/** One command per code-lens method, for the command palette and key bindings. */
export const FIT_COMMANDS: Readonly<Record<string, Method>> = {
  'qvr.fitSvi': 'svi',
  'qvr.fitNuts': 'nuts',
  'qvr.fitSmc': 'smc',
};

export function registerDashboard(context: vscode.ExtensionContext, log: (line: string) => void): void {
  context.subscriptions.push(
    vscode.commands.registerCommand('qvr.openDashboard', (...args: unknown[]) => openDashboard(args, log)),
    vscode.commands.registerCommand('qvr.fitSvi', (uri?: unknown) => openDashboard([FIT_COMMANDS['qvr.fitSvi'], uri], log)),
    vscode.commands.registerCommand('qvr.fitNuts', (uri?: unknown) => openDashboard([FIT_COMMANDS['qvr.fitNuts'], uri], log)),
    vscode.commands.registerCommand('qvr.fitSmc', (uri?: unknown) => openDashboard([FIT_COMMANDS['qvr.fitSmc'], uri], log)),
    vscode.languages.registerCodeLensProvider({ scheme: 'file', language: 'qvr' }, new FitCodeLensProvider()),
  );
}

/**
 * Three lenses, "Fit with SVI | NUTS | SMC", above each exported program; a lens on a
 * program other than the file's first export passes `--export NAME`.
 */
export class FitCodeLensProvider implements vscode.CodeLensProvider {
  provideCodeLenses(document: vscode.TextDocument): vscode.CodeLens[] {
    const lenses: vscode.CodeLens[] = [];
    for (const program of exportedPrograms(document.getText())) {
      const range = new vscode.Range(program.line, program.start, program.line, program.end);
      LENS_METHODS.forEach((method, index) => {
        const label = METHOD_LABELS[method];
        lenses.push(
          new vscode.CodeLens(range, {
            title: index === 0 ? `Fit with ${label}` : label,
            tooltip: `Open the QVR dashboard and fit ${program.name} with ${label}`,
            command: OPEN_DASHBOARD,
            arguments: program.primary ? [method, document.uri] : [method, document.uri, program.name],
          }),
        );
      });
    }
    return lenses;
  }
}

function fail(message: string, log: (line: string) => void): undefined {
  log(message);
  void vscode.window.showErrorMessage(message);
  return undefined;
}

/**
 * `qvr.openDashboard(method?, uri?)`. Every argument is optional: from the
 * command palette the active editor's file is opened without starting a fit; a key
 * binding may pass a method ("nuts"); menus in the explorer pass the file's Uri first.
 * Returns the terminal, or undefined when nothing was opened (the user was told why).
 */
export async function openDashboard(args: readonly unknown[], log: (line: string) => void): Promise<vscode.Terminal | undefined> {
  let [method, uri] = args;
  const exportName = typeof args[2] === 'string' ? args[2] : undefined;
  if (method instanceof vscode.Uri) {
    [method, uri] = [undefined, method];
  }
  if (method !== undefined && method !== null && !isMethod(method)) {
    return fail(`QVR: unknown method ${JSON.stringify(method)} for the dashboard; use one of ${METHODS.join(', ')}.`, log);
  }
  const target = uri instanceof vscode.Uri ? uri : vscode.window.activeTextEditor?.document.uri;
  if (target === undefined) {
    return fail('QVR: open a .qvr file to show it in the dashboard.', log);
  }
  const document = vscode.workspace.textDocuments.find((d) => d.uri.toString() === target.toString());
  if (target.scheme !== 'file') {
    return fail(`QVR: save ${path.basename(target.path) || 'the file'} to disk first: the dashboard reads the file.`, log);
  }
  if (document !== undefined && document.languageId !== 'qvr' && !target.fsPath.endsWith('.qvr')) {
    return fail(`QVR: ${path.basename(target.fsPath)} is not a .qvr file.`, log);
  }
  // The dashboard reads the file from disk: what the user sees is what gets fitted.
  if (document !== undefined && document.isDirty && !(await document.save())) {
    return fail(`QVR: could not save ${target.fsPath}; the dashboard reads the file from disk.`, log);
  }

  const file = target.fsPath;
  const own = vscode.workspace.getWorkspaceFolder(target);
  const folders = [own, ...(vscode.workspace.workspaceFolders ?? [])]
    .filter((f): f is vscode.WorkspaceFolder => f !== undefined && f.uri.scheme === 'file')
    .map((f) => f.uri.fsPath)
    .filter((f, i, all) => all.indexOf(f) === i);
  const location = locateCli({
    configuredPath: vscode.workspace.getConfiguration('qvr').get<string>('cli.path', ''),
    workspaceFolders: folders,
    env: process.env,
  });
  if (!location.found) {
    return fail(location.message, log);
  }
  const command = dashCommand(location.command, { file, method: method ?? undefined, exportName }, folders);
  const line = commandLine(command);
  log(`dashboard: ${line} (in ${command.cwd})`);
  const terminal = vscode.window.createTerminal({
    name: `QVR Dashboard: ${path.basename(file)}`,
    shellPath: command.command,
    shellArgs: command.args,
    cwd: command.cwd,
    message: `$ ${line}`,
    iconPath: new vscode.ThemeIcon('graph-line'),
    // a running fit cannot be revived by a window reload
    isTransient: true,
  });
  terminal.show();
  return terminal;
}
