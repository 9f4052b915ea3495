import assert from "node:assert/strict";
import { createServer } from "node:net";
import { join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import plugin, { createPlugin, TIMEOUTS } from "./index.js";

const FIXTURES = fileURLToPath(new URL("../../tests/fixtures/openclaw/plugin/", import.meta.url));
const CTX = { agentId: "main", sessionKey: "agent:main:main", sessionId: "7d2e9a41-3c6b-4f08-a5d1-92b4c7e60f3a", workspaceDir: "/w" };

/** A fake OpenClaw API: what register() hooked, to fire by name. */
export function fakeApi(pluginConfig = {}) {
  const hooks = new Map();
  return {
    pluginConfig,
    logger: { warn() {}, info() {}, debug() {} },
    on(name, handler, options) {
      hooks.set(name, { handler, options });
    },
    hooks,
    fire(name, event, ctx = CTX) {
      return hooks.get(name).handler(event, ctx);
    },
  };
}

function recordingFetch(replies = {}) {
  const calls = [];
  const fetchImpl = async (url, init) => {
    const body = JSON.parse(init.body);
    calls.push({ url, headers: init.headers, body });
    return new Response(JSON.stringify(replies[body.hook] ?? {}), { status: 200 });
  };
  return { calls, fetchImpl };
}

test("the default export is a plugin object with the manifest's id", () => {
  assert.equal(plugin.id, "signet-continuity");
  assert.equal(typeof plugin.register, "function");
  const api = fakeApi();
  plugin.register(api);
  assert.deepEqual([...api.hooks.keys()].sort(), Object.keys(TIMEOUTS).sort());
  assert.equal(api.hooks.get("before_compaction").options.timeoutMs, TIMEOUTS.before_compaction + 1000);
});

test("each hook posts {hook, event, ctx, signet} without messages, with the bearer token", async () => {
  const { calls, fetchImpl } = recordingFetch();
  const api = fakeApi({ url: "http://config.invalid:1" });
  createPlugin({ env: { SIGNET_TOKEN: "tok", SIGNET_URL: "http://signet.test:9/" }, fetchImpl }).register(api);
  const sessionFile = join(FIXTURES, "session_before_compaction.jsonl");
  const result = await api.fire("before_compaction", { messageCount: 17, messages: [{ role: "user" }], sessionFile });
  assert.equal(result, undefined);
  assert.equal(calls.length, 1);
  const [{ url, headers, body }] = calls;
  assert.equal(url, "http://signet.test:9/api/hooks/openclaw/");
  assert.equal(headers.Authorization, "Bearer tok");
  assert.equal(body.hook, "before_compaction");
  assert.deepEqual(body.event, { messageCount: 17, sessionFile });
  assert.equal(body.ctx.sessionId, CTX.sessionId);
  assert.equal(body.signet.transcript.current_task, "can you check why the backup cron failed last night?");
  assert.deepEqual(body.signet.usage, { context_tokens: 172300, model: "claude-sonnet-4-6" });
});

test("the plugin config names the URL and the token's variable when SIGNET_URL is unset", async () => {
  const { calls, fetchImpl } = recordingFetch();
  const api = fakeApi({ url: "http://config.test:7", tokenEnv: "MY_TOKEN" });
  createPlugin({ env: { MY_TOKEN: "t2" }, fetchImpl }).register(api);
  await api.fire("session_end", { sessionId: CTX.sessionId, reason: "daily" });
  assert.equal(calls[0].url, "http://config.test:7/api/hooks/openclaw/");
  assert.equal(calls[0].headers.Authorization, "Bearer t2");
});

test("no token: nothing is posted", async () => {
  const { calls, fetchImpl } = recordingFetch();
  const api = fakeApi();
  createPlugin({ env: {}, fetchImpl }).register(api);
  assert.equal(await api.fire("before_prompt_build", { prompt: "hi" }), undefined);
  assert.equal(calls.length, 0);
});

test("session_start's context is prepended to the session's first prompt only", async () => {
  const { calls, fetchImpl } = recordingFetch({ session_start: { prependContext: "## Recovery" } });
  const api = fakeApi();
  createPlugin({ env: { SIGNET_TOKEN: "t" }, fetchImpl }).register(api);
  assert.equal(await api.fire("session_start", { sessionId: CTX.sessionId, sessionKey: CTX.sessionKey }), undefined);
  assert.deepEqual(await api.fire("before_prompt_build", { prompt: "go" }), { prependContext: "## Recovery" });
  assert.equal(await api.fire("before_prompt_build", { prompt: "again" }), undefined);
  assert.equal(calls[1].body.event.prompt, "go");
});

test("lineage: SIGNET_PREVIOUS_SESSION_KEY, else the session that named this one next", async () => {
  const { calls, fetchImpl } = recordingFetch();
  const api = fakeApi();
  createPlugin({ env: { SIGNET_TOKEN: "t" }, fetchImpl }).register(api);
  await api.fire("session_end", { sessionId: "old-1", nextSessionId: "new-2" }, { sessionId: "old-1" });
  await api.fire("session_start", { sessionId: "new-2" }, { sessionId: "new-2", sessionKey: "agent:main:main" });
  assert.equal(calls[1].body.signet.previous_session_key, "old-1");
  // A hook whose ctx has no sessionId gets the one last seen under its sessionKey.
  await api.fire("before_prompt_build", { prompt: "x" }, { sessionKey: "agent:main:main" });
  assert.equal(calls[2].body.ctx.sessionId, "new-2");

  const other = fakeApi();
  const recorded = recordingFetch();
  createPlugin({ env: { SIGNET_TOKEN: "t", SIGNET_PREVIOUS_SESSION_KEY: "prev-9" }, fetchImpl: recorded.fetchImpl }).register(other);
  await other.fire("session_start", {});
  assert.equal(recorded.calls[0].body.signet.previous_session_key, "prev-9");
});

test("errors are swallowed: HTTP 500, bad JSON, a throwing fetch", async () => {
  for (const fetchImpl of [
    async () => new Response("{}", { status: 500 }),
    async () => new Response("not json", { status: 200 }),
    async () => {
      throw new TypeError("boom");
    },
  ]) {
    const api = fakeApi();
    createPlugin({ env: { SIGNET_TOKEN: "t" }, fetchImpl }).register(api);
    for (const name of Object.keys(TIMEOUTS)) {
      assert.equal(await api.fire(name, { prompt: "p", sessionFile: "/nonexistent" }), undefined);
    }
  }
});

async function hangingServer() {
  const sockets = new Set();
  const server = createServer((socket) => sockets.add(socket)); // accepts, never answers
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    close() {
      sockets.forEach((socket) => socket.destroy());
      server.close();
    },
  };
}

async function closedPort() {
  const server = createServer();
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  return `http://127.0.0.1:${port}`;
}

test("server down or hanging: every hook returns within its timeout, without throwing", async () => {
  const hanging = await hangingServer();
  try {
    for (const url of [hanging.url, await closedPort()]) {
      const api = fakeApi({ timeoutMs: 300 });
      createPlugin({ env: { SIGNET_TOKEN: "t", SIGNET_URL: url } }).register(api);
      for (const name of Object.keys(TIMEOUTS)) {
        const started = performance.now();
        const sessionFile = join(FIXTURES, "session.jsonl");
        const result = await api.fire(name, { prompt: "p", sessionFile, sessionId: CTX.sessionId });
        const took = performance.now() - started;
        assert.equal(result, undefined, name);
        assert.ok(took < 300 + 700, `${name} took ${took} ms`);
      }
    }
  } finally {
    hanging.close();
  }
});
