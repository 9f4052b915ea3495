// Against a running Signet server: run by tests/test_openclaw.py, which starts one and sets
// SIGNET_E2E_URL and SIGNET_E2E_TOKEN, then checks what the server stored.
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { createPlugin } from "./index.js";

const FIXTURES = fileURLToPath(new URL("../../tests/fixtures/openclaw/plugin/", import.meta.url));
const URL_ = process.env.SIGNET_E2E_URL;

async function fixture(name, sessionFile) {
  const { event, ctx } = JSON.parse(await readFile(join(FIXTURES, `plugin_hook_${name}.json`), "utf8"));
  if (sessionFile) event.sessionFile = join(FIXTURES, sessionFile);
  return [event, ctx];
}

test("a session through a compaction, and its recovery at the next prompt", { skip: !URL_ && "SIGNET_E2E_URL is not set" }, async () => {
  const hooks = new Map();
  const api = { pluginConfig: {}, logger: console, on: (name, handler) => hooks.set(name, handler) };
  createPlugin({ env: { SIGNET_URL: URL_, SIGNET_TOKEN: process.env.SIGNET_E2E_TOKEN } }).register(api);
  const fire = async (name, [event, ctx]) => hooks.get(name)(event, ctx);

  const [, ctx] = await fixture("session_start");
  assert.equal(await fire("session_start", await fixture("session_start")), undefined);
  const first = await fire("before_prompt_build", [{ prompt: "can you check why the backup cron failed last night?" }, ctx]);
  assert.equal(first, undefined);
  assert.equal(await fire("before_compaction", await fixture("before_compaction", "session_before_compaction.jsonl")), undefined);
  assert.equal(await fire("after_compaction", await fixture("after_compaction", "session.jsonl")), undefined);
  const recovered = await fire("before_prompt_build", [{ prompt: "did it work this time?" }, ctx]);
  assert.ok(recovered && typeof recovered.prependContext === "string", JSON.stringify(recovered));
  assert.match(recovered.prependContext, /^## Session Recovery Context/);
  assert.match(recovered.prependContext, /can you check why the backup cron failed last night\?/);
  // Once per compaction.
  assert.equal(await fire("before_prompt_build", [{ prompt: "thanks" }, ctx]), undefined);
  assert.equal(await fire("session_end", await fixture("session_end")), undefined);
});
