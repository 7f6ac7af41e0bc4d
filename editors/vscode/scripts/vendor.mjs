// Copies into the extension what it ships besides its bundle: the
// workflow and test schemas (for the YAML extension) and Mermaid's browser build
// (for the graph webview; no CDN).
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
const copy = (from, to) => {
  fs.mkdirSync(path.dirname(path.join(here, to)), { recursive: true });
  fs.copyFileSync(path.join(here, from), path.join(here, to));
};
copy('../../schemas/workflow.schema.json', 'schemas/workflow.schema.json');
copy('../../schemas/workflow-test.schema.json', 'schemas/workflow-test.schema.json');
copy('node_modules/mermaid/dist/mermaid.min.js', 'media/mermaid.min.js');
copy('node_modules/mermaid/LICENSE', 'media/mermaid.LICENSE');
