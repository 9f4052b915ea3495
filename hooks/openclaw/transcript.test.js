import assert from "node:assert/strict";
import { mkdtemp, readFile, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { parseLines, readTranscript } from "./transcript.js";

const FIXTURES = fileURLToPath(new URL("../../tests/fixtures/openclaw/plugin/", import.meta.url));

test("the facts before a compaction: the request, its file, the last reply, the usage", async () => {
  const facts = await readTranscript(join(FIXTURES, "session_before_compaction.jsonl"));
  assert.equal(facts.transcript.current_task, "can you check why the backup cron failed last night?");
  assert.deepEqual(facts.transcript.recent_prompts, [facts.transcript.current_task]);
  // The silent memory-flush turn is not the person's work: its prompt, write and NO_REPLY.
  assert.deepEqual(facts.transcript.modified_files, ["scripts/backup.sh"]);
  assert.match(facts.transcript.last_assistant_message, /^The NAS dropped the SSH connection/);
  assert.deepEqual(facts.transcript.todos, []);
  assert.equal(facts.transcript.context_tokens, 172300);
  assert.deepEqual(facts.usage, { context_tokens: 172300, model: "claude-sonnet-4-6" });
  assert.equal(facts.compactions, 0);
  assert.equal(facts.truncated, false);
});

test("after a compaction: its summary, its files, and the usage counted afresh", async () => {
  const facts = await readTranscript(join(FIXTURES, "session.jsonl"));
  assert.match(facts.compactSummary, /^## Goal\nFix the nightly backup cron\./);
  assert.equal(facts.compactions, 1);
  assert.equal(facts.transcript.current_task, "did it work this time?");
  assert.deepEqual(facts.transcript.modified_files, ["scripts/backup.sh", "memory/2026-08-18.md"]);
  assert.equal(facts.transcript.context_tokens, 9403);
});

test("bad lines are skipped, not fatal", () => {
  const facts = parseLines([
    "not json",
    "{broken",
    "[1,2]",
    "null",
    JSON.stringify({ type: "message", message: { role: "user", content: 42 } }),
    JSON.stringify({ type: "message", message: { role: "assistant", content: [null, { type: "toolCall", name: "edit", arguments: null }], usage: { input: "x" } } }),
    JSON.stringify({ type: "message", message: { role: "user", content: "plain string prompt" } }),
  ]);
  assert.equal(facts.transcript.current_task, "plain string prompt");
  assert.equal(facts.transcript.context_tokens, null);
  assert.equal(facts.usage, null);
});

test("only the tail is read, and the cut line is dropped", async () => {
  const dir = await mkdtemp(join(tmpdir(), "signet-ocl-"));
  const path = join(dir, "s.jsonl");
  const filler = JSON.stringify({ type: "message", message: { role: "user", content: "x".repeat(5000) } });
  const last = JSON.stringify({ type: "message", message: { role: "user", content: "the latest request" } });
  await writeFile(path, `${filler}\n`.repeat(50) + `${last}\n`);
  const facts = await readTranscript(path, { maxBytes: 8000 });
  assert.equal(facts.truncated, true);
  assert.equal(facts.transcript.current_task, "the latest request");
  assert.ok(facts.transcript.recent_prompts.length <= 2);
});

test("a missing file, a folder or a bad path gives null", async () => {
  assert.equal(await readTranscript(join(FIXTURES, "missing.jsonl")), null);
  assert.equal(await readTranscript(FIXTURES), null);
  assert.equal(await readTranscript("bad\0path"), null);
  assert.equal(await readTranscript(undefined), null);
  // The fixture itself is left as it was.
  assert.ok((await readFile(join(FIXTURES, "session.jsonl"), "utf8")).startsWith('{"type":"session"'));
});
