/**
 * The QVR extension: starts `qvr-lsp` over stdio for `qvr` documents and offers the
 * commands "QVR: Restart Language Server" and "QVR: Show Language Server Output".
 * The dashboard command and the "Fit with ..." code lenses live in dashboard.ts.
 *
 * Highlighting (TextMate grammar) and editing rules (language configuration) are static
 * contributions in package.json and work without the server. Nothing semantic lives here:
 * everything a user sees beyond colours comes from the server.
 */
import * as vscode from 'vscode';
import {
  Executable,
  LanguageClient,
  LanguageClientOptions,
  ServerOptions,
  TransportKind,
} from 'vscode-languageclient/node';
import { registerDashboard } from './dashboard';
import { locateServer } from './server';

let client: LanguageClient | undefined;
let output: vscode.LogOutputChannel | undefined;
/** Serialises start/stop so that quick successive restarts cannot interleave. */
let pending: Promise<void> = Promise.resolve();

export function activate(context: vscode.ExtensionContext): Promise<void> {
  output = vscode.window.createOutputChannel('QVR Language Server', { log: true });
  context.subscriptions.push(
    output,
    vscode.commands.registerCommand('qvr.restartServer', () => restart()),
    vscode.commands.registerCommand('qvr.showServerOutput', () => output?.show(true)),
    vscode.workspace.onDidChangeConfiguration((event) => {
      if (event.affectsConfiguration('qvr.server')) {
        void restart();
      }
    }),
  );
  registerDashboard(context, log);
  return queue(start);
}

export function deactivate(): Promise<void> {
  return queue(stop);
}

function restart(): Promise<void> {
  return queue(async () => {
    await stop();
    await start();
  });
}

function queue(step: () => Promise<void>): Promise<void> {
  pending = pending.then(step, step);
  return pending;
}

function log(line: string): void {
  output?.info(line);
}

async function start(): Promise<void> {
  const config = vscode.workspace.getConfiguration('qvr');
  const folders = (vscode.workspace.workspaceFolders ?? [])
    .filter((folder) => folder.uri.scheme === 'file')
    .map((folder) => folder.uri.fsPath);
  const location = locateServer({
    configuredPath: config.get<string>('server.path', ''),
    workspaceFolders: folders,
    env: process.env,
  });
  if (!location.found) {
    log(location.message);
    void vscode.window.showErrorMessage(location.message, 'Open Settings', 'Show Output').then((choice) => {
      if (choice === 'Open Settings') {
        void vscode.commands.executeCommand('workbench.action.openSettings', 'qvr.server');
      } else if (choice === 'Show Output') {
        output?.show(true);
      }
    });
    return;
  }

  const args = config.get<string[]>('server.args', []);
  log(`starting ${location.command} ${args.join(' ')} (found via ${location.source})`);
  const executable: Executable = {
    command: location.command,
    args,
    transport: TransportKind.stdio,
    options: folders.length > 0 ? { cwd: folders[0] } : {},
  };
  const serverOptions: ServerOptions = { run: executable, debug: executable };
  const clientOptions: LanguageClientOptions = {
    documentSelector: [
      { scheme: 'file', language: 'qvr' },
      { scheme: 'untitled', language: 'qvr' },
    ],
    // Server stderr, client errors and (with qvr.trace.server) the LSP trace all go here.
    outputChannel: output,
    traceOutputChannel: output,
  };
  // The id "qvr" makes the client read the trace level from the setting qvr.trace.server.
  client = new LanguageClient('qvr', 'QVR Language Server', serverOptions, clientOptions);
  try {
    await client.start();
  } catch (error) {
    const message = `QVR: ${location.command} did not start: ${String(error)}`;
    log(message);
    client = undefined;
    void vscode.window.showErrorMessage(message, 'Show Output').then((choice) => {
      if (choice === 'Show Output') {
        output?.show(true);
      }
    });
  }
}

async function stop(): Promise<void> {
  const running = client;
  client = undefined;
  if (running === undefined) {
    return;
  }
  try {
    await running.stop();
  } catch (error) {
    log(`stopping the server failed: ${String(error)}`);
  }
}
