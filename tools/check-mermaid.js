// check-mermaid.js parses every ```mermaid block of the Markdown files given as arguments
// with Mermaid's own parser, and exits 1 on the first block that does not parse.
//
//   node tools/check-mermaid.js docs/sequence.md
//
// Mermaid is written for browsers: its sanitizer (DOMPurify) needs a window and a
// document even just to parse, so jsdom provides them. Nothing is rendered.
import { readFile } from 'node:fs/promises';
import { JSDOM } from 'jsdom';

const { window } = new JSDOM('<!doctype html><html><body></body></html>');
globalThis.window = window;
globalThis.document = window.document;
// DOMPurify and mermaid read these at import time, so set them before importing mermaid.
const { default: mermaid } = await import('mermaid');
mermaid.initialize({ startOnLoad: false });

/** Returns the mermaid blocks of a Markdown text with the line each starts on. */
function mermaidBlocks(markdown) {
  const blocks = [];
  const lines = markdown.split('\n');
  for (let i = 0; i < lines.length; i++) {
    if (lines[i].trim() !== '```mermaid') continue;
    const start = i + 1;
    const body = [];
    for (i++; i < lines.length && lines[i].trim() !== '```'; i++) body.push(lines[i]);
    if (i === lines.length) throw new Error(`unterminated mermaid block at line ${start}`);
    blocks.push({ line: start, text: body.join('\n') });
  }
  return blocks;
}

const files = process.argv.slice(2);
if (files.length === 0) {
  console.error('usage: node check-mermaid.js FILE.md...');
  process.exit(2);
}
let failed = 0;
let parsed = 0;
for (const file of files) {
  const blocks = mermaidBlocks(await readFile(file, 'utf8'));
  if (blocks.length === 0) {
    console.error(`${file}: no mermaid block`);
    failed++;
  }
  for (const block of blocks) {
    try {
      const result = await mermaid.parse(block.text);
      console.log(`ok   ${file}:${block.line} ${result.diagramType}`);
      parsed++;
    } catch (err) {
      console.error(`FAIL ${file}:${block.line}: ${err.message ?? err}`);
      failed++;
    }
  }
}
console.log(`${parsed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
