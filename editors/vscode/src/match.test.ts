import { test } from 'node:test';
import assert from 'node:assert/strict';
import { graphPage, isTestFile, isTqwFile, isWorkflowFile } from './match';

test('workflow files by name', () => {
  assert.equal(isWorkflowFile('/w/refund.tqw.yaml', 'tqw: v1'), true);
  assert.equal(isWorkflowFile('/w/refund.tqw.yml', ''), true);
  assert.equal(isWorkflowFile('/w/docker-compose.yaml', 'services:'), false);
  assert.equal(isWorkflowFile('/w/tqw.yaml.bak', ''), false);
});

test('workflow files by their first line', () => {
  assert.equal(isWorkflowFile('/w/hello.yaml', '# yaml-language-server: $schema=../schemas/workflow.schema.json'), true);
  assert.equal(isWorkflowFile('/w/x.yaml', '# yaml-language-server: $schema=https://www.schemastore.org/tqw-workflow.json'), true);
  assert.equal(isWorkflowFile('/w/x.yaml', '# yaml-language-server: $schema=https://json.schemastore.org/github-workflow.json'), false);
});

test('test files by name, for the language server but not as workflows', () => {
  assert.equal(isTestFile('/w/refund.test.yaml'), true);
  assert.equal(isTestFile('/w/refund.test.yml'), true);
  assert.equal(isTestFile('/w/refund.tqw.yaml'), false);
  assert.equal(isTestFile('/w/test.yaml'), false);
  assert.equal(isTqwFile('/w/refund.test.yaml', 'tqw: test/v1'), true);
  assert.equal(isTqwFile('/w/refund.tqw.yaml', ''), true);
  assert.equal(isTqwFile('/w/hello.yaml', '# yaml-language-server: $schema=../schemas/workflow.schema.json'), true);
  assert.equal(isTqwFile('/w/docker-compose.yaml', 'services:'), false);
  // A test file's first line names the test schema; it is no workflow
  // (no "Run workflow", no graph), and a file named otherwise is none.
  assert.equal(isWorkflowFile('/w/refund.test.yaml', '# yaml-language-server: $schema=../schemas/workflow-test.schema.json'), false);
  assert.equal(isTqwFile('/w/cases.yaml', '# yaml-language-server: $schema=../schemas/workflow-test.schema.json'), false);
});

test('the graph page escapes the graph and loads only the vendored script', () => {
  const html = graphPage({ mermaidSrc: 'vscode-resource:/m.js', cspSource: 'vscode-resource:', nonce: 'n0', title: 'a<b', graph: 'A-->B["x<y"]' });
  assert.match(html, /A--&gt;B\[&quot;x&lt;y&quot;\]/);
  assert.doesNotMatch(html, /https?:\/\//);
  assert.match(html, /script-src 'nonce-n0'/);
});
