// The tqw extension: starts `tqw-dsl lsp` for workflow and test files, contributes
// the schema to Red Hat's YAML extension (package.json, yamlValidation),
// and offers "Run workflow" (in a terminal) and "Show graph" (Mermaid in
// a webview).
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import * as path from 'node:path';
import * as vscode from 'vscode';
import { LanguageClient, LanguageClientOptions, ServerOptions, TransportKind } from 'vscode-languageclient/node';
import { graphPage, isTqwFile } from './match';

let client: LanguageClient | undefined;

function binary(): string {
  return vscode.workspace.getConfiguration('tqw').get<string>('path') || 'tqw-dsl';
}

// isTqw reports whether the language server should see doc: a workflow
// or a test file.
export function isTqw(doc: vscode.TextDocument): boolean {
  if (doc.languageId !== 'yaml') return false;
  return isTqwFile(doc.fileName, doc.lineCount > 0 ? doc.lineAt(0).text : '');
}

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  // The server sees only workflow and test files: the client watches every YAML
  // document and the middleware drops the others, since "first line
  // names the schema" is not a glob a document selector can express.
  const opened = new Set<string>();
  const clientOptions: LanguageClientOptions = {
    documentSelector: [{ language: 'yaml' }],
    middleware: {
      didOpen: async (doc, next) => {
        if (!isTqw(doc)) return;
        opened.add(doc.uri.toString());
        return next(doc);
      },
      didChange: async (e, next) => {
        const uri = e.document.uri.toString();
        if (opened.has(uri)) return next(e);
        if (isTqw(e.document) && client) {
          // The first line now names the schema: the server starts
          // watching the file.
          opened.add(uri);
          await client.sendNotification('textDocument/didOpen', {
            textDocument: { uri, languageId: 'yaml', version: e.document.version, text: e.document.getText() },
          });
        }
      },
      didClose: async (doc, next) => {
        if (!opened.delete(doc.uri.toString())) return;
        return next(doc);
      },
      didSave: async (doc, next) => (opened.has(doc.uri.toString()) ? next(doc) : undefined),
      provideCompletionItem: (doc, pos, ctx, tok, next) => (opened.has(doc.uri.toString()) ? next(doc, pos, ctx, tok) : undefined),
      provideHover: (doc, pos, tok, next) => (opened.has(doc.uri.toString()) ? next(doc, pos, tok) : undefined),
      provideDefinition: (doc, pos, tok, next) => (opened.has(doc.uri.toString()) ? next(doc, pos, tok) : undefined),
      provideReferences: (doc, pos, ctx, tok, next) => (opened.has(doc.uri.toString()) ? next(doc, pos, ctx, tok) : undefined),
      prepareRename: (doc, pos, tok, next) => (opened.has(doc.uri.toString()) ? next(doc, pos, tok) : undefined),
      provideRenameEdits: (doc, pos, name, tok, next) => (opened.has(doc.uri.toString()) ? next(doc, pos, name, tok) : undefined),
      provideDocumentSymbols: (doc, tok, next) => (opened.has(doc.uri.toString()) ? next(doc, tok) : undefined),
      provideCodeActions: (doc, range, ctx, tok, next) => (opened.has(doc.uri.toString()) ? next(doc, range, ctx, tok) : undefined),
    },
  };
  const serverOptions: ServerOptions = { command: binary(), args: ['lsp'], transport: TransportKind.stdio };
  client = new LanguageClient('tqw', 'tqw workflows', serverOptions, clientOptions);
  context.subscriptions.push(
    vscode.commands.registerCommand('tqw.runWorkflow', runWorkflow),
    vscode.commands.registerCommand('tqw.showGraph', () => showGraph(context)),
  );
  try {
    await client.start();
  } catch (err) {
    vscode.window.showErrorMessage(`tqw: cannot start "${binary()} lsp": ${err}. Set tqw.path to the tqw-dsl binary.`);
  }
}

export async function deactivate(): Promise<void> {
  await client?.stop();
}

function activeWorkflow(): vscode.TextDocument | undefined {
  const doc = vscode.window.activeTextEditor?.document;
  if (!doc || doc.uri.scheme !== 'file') {
    vscode.window.showWarningMessage('tqw: open a workflow file first.');
    return undefined;
  }
  return doc;
}

function shellQuote(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}

async function runWorkflow(): Promise<void> {
  const doc = activeWorkflow();
  if (!doc) return;
  await doc.save();
  const folder = vscode.workspace.getWorkspaceFolder(doc.uri)?.uri.fsPath ?? path.dirname(doc.fileName);
  const term = vscode.window.createTerminal({ name: `tqw run ${path.basename(doc.fileName)}`, cwd: folder });
  term.show();
  term.sendText(`${shellQuote(binary())} run ${shellQuote(doc.fileName)}`);
}

const panels = new Map<string, vscode.WebviewPanel>();

async function showGraph(context: vscode.ExtensionContext): Promise<void> {
  const doc = activeWorkflow();
  if (!doc) return;
  await doc.save();
  const key = doc.uri.toString();
  let panel = panels.get(key);
  if (!panel) {
    const media = vscode.Uri.joinPath(context.extensionUri, 'media');
    panel = vscode.window.createWebviewPanel('tqwGraph', `Graph: ${path.basename(doc.fileName)}`, vscode.ViewColumn.Beside, {
      enableScripts: true,
      localResourceRoots: [media],
    });
    panels.set(key, panel);
    panel.onDidDispose(() => panels.delete(key));
    const redraw = vscode.workspace.onDidSaveTextDocument((saved) => {
      if (saved.uri.toString() === key) void render(context, panel!, saved);
    });
    panel.onDidDispose(() => redraw.dispose());
  }
  panel.reveal(vscode.ViewColumn.Beside);
  await render(context, panel, doc);
}

function render(context: vscode.ExtensionContext, panel: vscode.WebviewPanel, doc: vscode.TextDocument): Promise<void> {
  return new Promise((resolve) => {
    execFile(binary(), ['graph', doc.fileName], { maxBuffer: 16 << 20 }, (err, stdout, stderr) => {
      if (err) {
        vscode.window.showErrorMessage(`tqw graph: ${stderr.trim() || err.message}`);
        resolve();
        return;
      }
      const script = panel.webview.asWebviewUri(vscode.Uri.joinPath(context.extensionUri, 'media', 'mermaid.min.js'));
      panel.webview.html = graphPage({
        mermaidSrc: script.toString(),
        cspSource: panel.webview.cspSource,
        nonce: randomBytes(16).toString('hex'),
        title: path.basename(doc.fileName),
        graph: stdout,
      });
      resolve();
    });
  });
}
