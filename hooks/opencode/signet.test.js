// node --test hooks/opencode/signet.test.js
//
// The plugin loaded with a fake OpenCode ctx and its hooks fired by hand. Without a server
// (a closed port, then one that accepts and never answers) every hook must return within
// its timeout without throwing. With SIGNET_E2E_URL and SIGNET_E2E_TOKEN (an ingest+read
// token; tests/test_opencode.py starts the server and sets both) it checks what the server
// stored and that the context comes back into the prompt and the compaction.

import assert from "node:assert/strict"
import net from "node:net"
import { after, before, describe, test } from "node:test"

import { SignetPlugin } from "./signet.js"

const E2E_URL = process.env.SIGNET_E2E_URL ?? ""
const E2E_TOKEN = process.env.SIGNET_E2E_TOKEN ?? ""
const PROJECT = "/home/alice/projects/webapp"
const ENV_KEYS = ["SIGNET_URL", "SIGNET_TOKEN", "SIGNET_TIMEOUT_MS", "SIGNET_PREVIOUS_SESSION_KEY"]

function fakeCtx() {
  return {
    project: { id: "b7e3c1a9d2f4", worktree: PROJECT },
    client: { session: {}, app: { log: async () => ({}) } },
    $: () => {
      throw new Error("the plugin must not run shell commands")
    },
    directory: PROJECT,
    worktree: PROJECT,
    serverUrl: new URL("http://127.0.0.1:4096"),
  }
}

async function load(env) {
  for (const key of ENV_KEYS) delete process.env[key]
  Object.assign(process.env, env)
  return SignetPlugin(fakeCtx())
}

const sessionCreated = (id, extra = {}) => ({
  type: "session.created",
  properties: {
    info: {
      id,
      projectID: "b7e3c1a9d2f4",
      directory: PROJECT,
      title: "New session",
      version: "1.14.49",
      time: { created: Date.now(), updated: Date.now() },
      ...extra,
    },
  },
})

const chatOutput = (sessionID, text) => ({
  message: { id: "msg_1", sessionID, role: "user", time: { created: Date.now() } },
  parts: [{ id: "prt_1", sessionID, messageID: "msg_1", type: "text", text }],
})

// Every hook fired once; how long each took.
async function fireAll(hooks, sessionID) {
  const timings = {}
  const time = async (name, call) => {
    const started = performance.now()
    await call()
    timings[name] = performance.now() - started
  }
  await time("session.created", () => hooks.event({ event: sessionCreated(sessionID) }))
  const output = chatOutput(sessionID, "Add rate limiting to POST /api/login")
  await time("chat.message", () =>
    hooks["chat.message"]({ sessionID, agent: "build", model: { providerID: "anthropic", modelID: "claude-sonnet-4-6" } }, output),
  )
  await time("tool.execute.after", () =>
    hooks["tool.execute.after"](
      { tool: "edit", sessionID, callID: "call_1", args: { filePath: `${PROJECT}/src/routes/auth.ts`, oldString: "a", newString: "b" } },
      { title: "src/routes/auth.ts", output: "", metadata: {} },
    ),
  )
  await time("session.idle", () => hooks.event({ event: { type: "session.idle", properties: { sessionID } } }))
  const compacting = { context: [] }
  await time("experimental.session.compacting", () =>
    hooks["experimental.session.compacting"]({ sessionID }, compacting),
  )
  await time("session.compacted", () => hooks.event({ event: { type: "session.compacted", properties: { sessionID } } }))
  return { timings, output, compacting }
}

test("without a token the plugin registers no hook", async () => {
  assert.deepEqual(await load({ SIGNET_URL: "http://127.0.0.1:9" }), {})
})

describe("with the server down", () => {
  let closedPort
  let silent
  const sockets = new Set()

  before(async () => {
    const probe = net.createServer()
    await new Promise((resolve) => probe.listen(0, "127.0.0.1", resolve))
    closedPort = probe.address().port
    await new Promise((resolve) => probe.close(resolve))
    // Accepts connections and never answers: only the timeout can end a request.
    silent = net.createServer((socket) => {
      sockets.add(socket)
      socket.on("error", () => {})
    })
    await new Promise((resolve) => silent.listen(0, "127.0.0.1", resolve))
  })

  after(() => {
    for (const socket of sockets) socket.destroy()
    silent.close()
  })

  test("a refused connection: every hook returns at once, nothing injected", async () => {
    const hooks = await load({ SIGNET_URL: `http://127.0.0.1:${closedPort}`, SIGNET_TOKEN: "t", SIGNET_TIMEOUT_MS: "300" })
    const { timings, output, compacting } = await fireAll(hooks, "ses_down1")
    for (const [name, ms] of Object.entries(timings)) assert.ok(ms < 1000, `${name} took ${ms} ms`)
    assert.equal(output.parts[0].text, "Add rate limiting to POST /api/login")
    assert.deepEqual(compacting.context, [])
  })

  test("a server that never answers: every hook returns within its timeout", async () => {
    const timeout = 300
    const port = silent.address().port
    const hooks = await load({ SIGNET_URL: `http://127.0.0.1:${port}`, SIGNET_TOKEN: "t", SIGNET_TIMEOUT_MS: String(timeout) })
    const { timings, output, compacting } = await fireAll(hooks, "ses_down2")
    const slack = 400
    for (const [name, ms] of Object.entries(timings)) {
      const limit = name === "experimental.session.compacting" ? 2 * timeout : timeout
      assert.ok(ms < limit + slack, `${name} took ${ms} ms (limit ${limit} ms)`)
    }
    assert.ok(timings["chat.message"] >= timeout - 50, "the request was really waited for")
    assert.equal(output.parts[0].text, "Add rate limiting to POST /api/login")
    assert.deepEqual(compacting.context, [])
  })

  test("a prompt racing its session.created shares one timeout", async () => {
    const timeout = 300
    const port = silent.address().port
    const hooks = await load({ SIGNET_URL: `http://127.0.0.1:${port}`, SIGNET_TOKEN: "t", SIGNET_TIMEOUT_MS: String(timeout) })
    const started = performance.now()
    const created = hooks.event({ event: sessionCreated("ses_down3") })
    const output = chatOutput("ses_down3", "Hello")
    await hooks["chat.message"]({ sessionID: "ses_down3" }, output)
    await created
    const took = performance.now() - started
    assert.ok(took < timeout + 400, `took ${took} ms`)
    assert.equal(output.parts[0].text, "Hello")
  })

  test("malformed calls do not throw", async () => {
    const hooks = await load({ SIGNET_URL: `http://127.0.0.1:${closedPort}`, SIGNET_TOKEN: "t" })
    await hooks.event({})
    await hooks.event({ event: null })
    await hooks["chat.message"](undefined, undefined)
    await hooks["tool.execute.after"]({ sessionID: "ses_x" }, null)
    await hooks["experimental.session.compacting"]({ sessionID: "ses_x" }, {})
  })
})

describe("against the server", { skip: E2E_URL && E2E_TOKEN ? false : "SIGNET_E2E_URL/SIGNET_E2E_TOKEN not set" }, () => {
  const stored = async (sessionID) => {
    const response = await fetch(`${E2E_URL}/api/sessions/${sessionID}/`, {
      headers: { authorization: `Bearer ${E2E_TOKEN}` },
    })
    return response.status === 200 ? response.json() : null
  }

  test("events are stored and the compaction gets the recovery context", async () => {
    const hooks = await load({ SIGNET_URL: E2E_URL, SIGNET_TOKEN: E2E_TOKEN })
    const sessionID = "ses_e2eFirst01"
    await hooks.event({
      event: {
        type: "message.updated",
        properties: {
          info: {
            id: "msg_2", sessionID, role: "assistant", modelID: "claude-sonnet-4-6",
            tokens: { input: 12, output: 400, reasoning: 0, cache: { read: 19000, write: 600 } },
          },
        },
      },
    })
    const { output, compacting } = await fireAll(hooks, sessionID)
    assert.equal(output.parts[0].text, "Add rate limiting to POST /api/login", "nothing to recover yet")
    const session = await stored(sessionID)
    assert.equal(session.harness, "opencode")
    assert.equal(session.project, PROJECT)
    assert.equal(session.prompt_count, 1)
    assert.equal(session.compaction_count, 1)
    assert.equal(session.context_tokens, 20012)
    assert.ok(session.checkpoint_total >= 1)
    assert.equal(compacting.context.length, 1)
    assert.match(compacting.context[0], /^## Session Recovery Context/)
    assert.match(compacting.context[0], /Add rate limiting to POST \/api\/login/)
    assert.match(compacting.context[0], /src\/routes\/auth\.ts/)
    await hooks.event({ event: { type: "session.deleted", properties: { info: { id: sessionID, directory: PROJECT } } } })
    assert.ok((await stored(sessionID)).ended_at)
  })

  test("a new session's first prompt gets the recovery context; subagents are skipped", async () => {
    const hooks = await load({ SIGNET_URL: E2E_URL, SIGNET_TOKEN: E2E_TOKEN, SIGNET_PREVIOUS_SESSION_KEY: "ses_e2eFirst01" })
    const sessionID = "ses_e2eSecond02"
    // The plugin may see the prompt before session.created's reply: it waits for it.
    const created = hooks.event({ event: sessionCreated(sessionID) })
    const output = chatOutput(sessionID, "Carry on")
    await hooks["chat.message"]({ sessionID }, output)
    await created
    assert.match(output.parts[0].text, /^## Session Recovery Context/)
    assert.match(output.parts[0].text, /Add rate limiting/)
    assert.ok(output.parts[0].text.endsWith("\n\n---\n\nCarry on"))
    const session = await stored(sessionID)
    assert.equal(session.previous_session_key, "ses_e2eFirst01")
    assert.equal(session.injection_total, 1)

    const child = "ses_e2eChild03"
    await hooks.event({ event: sessionCreated(child, { parentID: sessionID }) })
    const childOutput = chatOutput(child, "Search the codebase")
    await hooks["chat.message"]({ sessionID: child }, childOutput)
    assert.equal(childOutput.parts[0].text, "Search the codebase")
    assert.equal(await stored(child), null)
  })
})
