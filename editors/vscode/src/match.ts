// Which YAML files are tqw workflows: those named *.tqw.yaml or
// *.tqw.yml, and those whose first line names the tqw schema (as every
// file in the repository's workflows/ does).

const nameRE = /\.tqw\.ya?ml$/;
const modelineRE = /^#\s*yaml-language-server:\s*\$schema=\S*(workflow\.schema\.json|tqw-workflow\.json)\s*$/;

export function isWorkflowFile(fileName: string, firstLine: string): boolean {
  return !isTestFile(fileName) && (nameRE.test(fileName) || modelineRE.test(firstLine));
}

// Test files (tqw-dsl test) are named *.test.yaml or *.test.yml. The name
// alone decides, as it does for tqw-dsl and its language server: a file
// named otherwise is loaded as a workflow whatever its first line says.
const testNameRE = /\.test\.ya?ml$/;

export function isTestFile(fileName: string): boolean {
  return testNameRE.test(fileName);
}

// isTqwFile is what the language server is given: workflows and tests.
export function isTqwFile(fileName: string, firstLine: string): boolean {
  return isTestFile(fileName) || isWorkflowFile(fileName, firstLine);
}

// graphPage is the webview's HTML: the Mermaid source in a <pre>, drawn
// by the vendored mermaid.min.js under a strict content security policy.
export function graphPage(opts: { mermaidSrc: string; cspSource: string; nonce: string; title: string; graph: string }): string {
  const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
  return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="UTF-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; img-src ${opts.cspSource} data:; style-src ${opts.cspSource} 'unsafe-inline'; script-src 'nonce-${opts.nonce}';">
<title>${esc(opts.title)}</title>
</head>
<body>
<pre class="mermaid">${esc(opts.graph)}</pre>
<script nonce="${opts.nonce}" src="${opts.mermaidSrc}"></script>
<script nonce="${opts.nonce}">mermaid.initialize({ startOnLoad: true, securityLevel: 'strict' });</script>
</body>
</html>`;
}
