// Signet Continuity plugin for OpenCode: forwards the session's events to the Signet
// service and puts its recovery context back into the session.
//
// Installed into ~/.config/opencode/plugins/ by `manage.py install_hooks opencode`.
// Plain ESM, no dependencies. Environment: SIGNET_TOKEN (required; without it the plugin
// does nothing), SIGNET_URL (default below), SIGNET_PREVIOUS_SESSION_KEY (handoff: the
// session this one continues), SIGNET_TIMEOUT_MS (per request, default 2000; compaction
// gets twice that).
//
// Every body posts to /api/hooks/opencode/ and names its event: {"event": <bus event>} or
// {"hook": <name>, "input", "output"}, with "directory", "worktree" and "signet". The reply
// is {"context": "..."} or {}. Where the context goes:
// - session.created: its context is held and prepended to the session's first prompt
//   (OpenCode's event hook cannot inject anything itself);
// - chat.message: its context (and any held one) is prepended to the prompt's first text part;
// - experimental.session.compacting: posts the compacting hook (the server writes its
//   pre-compaction checkpoint), then "signet.compaction.context", and pushes the reply into
//   output.context, so the compaction summary carries the recovery context.
// Edits are reported by tool.execute.after (tools whose args name a file or a patch);
// file.edited is not forwarded: it names no session. The context usage of the last
// response (message.updated, counted here, never posted alone) goes with each request.
// Every request has a timeout and every error is swallowed: OpenCode never waits long for
// Signet and never breaks because of it. Sessions with a parent (subagents) are skipped.

const DEFAULT_URL = "http://127.0.0.1:8000"
const TOKEN_ENV = "SIGNET_TOKEN"
const DEFAULT_TIMEOUT_MS = 2000
const FORWARDED_EVENTS = new Set([
  "session.created",
  "session.idle",
  "session.compacted",
  "session.deleted",
])
const PROMPT_CHARS = 8000 // the server keeps far less; this only bounds the body
const SEPARATOR = "\n\n---\n\n"

function timeoutFrom(value) {
  const ms = Number.parseInt(value ?? "", 10)
  return Number.isFinite(ms) && ms > 0 ? ms : DEFAULT_TIMEOUT_MS
}

function patchHeaders(text) {
  // Only the lines naming files: a patch can be large, and the server reads nothing else.
  return text
    .split("\n")
    .filter((line) => line.startsWith("*** "))
    .join("\n")
}

export const SignetPlugin = async (ctx) => {
  const env = process.env
  const token = env[TOKEN_ENV] ?? ""
  if (!token) return {}
  const endpoint = `${(env.SIGNET_URL || DEFAULT_URL).replace(/\/+$/, "")}/api/hooks/opencode/`
  const timeoutMs = timeoutFrom(env.SIGNET_TIMEOUT_MS)
  const previous = (env.SIGNET_PREVIOUS_SESSION_KEY ?? "").trim()
  const directory = typeof ctx?.directory === "string" ? ctx.directory : ""
  const worktree = typeof ctx?.worktree === "string" ? ctx.worktree : ""

  const children = new Set() // subagent sessions: not the user's work, not recovered into
  const starts = new Map() // sessionID -> promise of session.created's context
  const usage = new Map() // sessionID -> {context_tokens, model} of its last response

  function client(sessionID) {
    const signet = {}
    if (directory) signet.project_normalized = directory
    if (worktree && worktree !== "/") signet.git_root = worktree
    if (previous) signet.previous_session_key = previous
    if (sessionID && usage.has(sessionID)) signet.usage = usage.get(sessionID)
    return signet
  }

  // The reply's context ("" when none, or on any failure); never throws.
  async function post(body, signal, sessionID) {
    try {
      const response = await fetch(endpoint, {
        method: "POST",
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
        body: JSON.stringify({ directory, worktree, ...body, signet: client(sessionID) }),
        signal: signal ?? AbortSignal.timeout(timeoutMs),
      })
      if (!response.ok) return ""
      const reply = await response.json()
      return typeof reply?.context === "string" ? reply.context : ""
    } catch {
      return ""
    }
  }

  function recordUsage(info) {
    const tokens = info?.tokens
    if (info?.role !== "assistant" || !tokens || !info.sessionID) return
    const count =
      (tokens.input ?? 0) + (tokens.output ?? 0) + (tokens.cache?.read ?? 0) + (tokens.cache?.write ?? 0)
    if (Number.isFinite(count) && count > 0) {
      usage.set(info.sessionID, { context_tokens: count, model: info.modelID ?? "" })
    }
  }

  return {
    event: async ({ event }) => {
      try {
        const type = event?.type
        const properties = event?.properties ?? {}
        if (type === "message.updated") return recordUsage(properties.info)
        if (!FORWARDED_EVENTS.has(type)) return
        const sessionID = properties.sessionID ?? properties.info?.id
        if (typeof sessionID !== "string" || !sessionID) return
        if (type === "session.created" && properties.info?.parentID) children.add(sessionID)
        if (children.has(sessionID)) {
          if (type === "session.deleted") children.delete(sessionID)
          return
        }
        if (type === "session.created") {
          const start = post({ event }, undefined, sessionID)
          starts.set(sessionID, start)
          await start
          return
        }
        await post({ event }, undefined, sessionID)
        if (type === "session.deleted") {
          starts.delete(sessionID)
          usage.delete(sessionID)
        }
      } catch {
        // never break OpenCode
      }
    },

    "chat.message": async (input, output) => {
      try {
        const sessionID = input?.sessionID
        if (typeof sessionID !== "string" || !sessionID || children.has(sessionID)) return
        const parts = Array.isArray(output?.parts) ? output.parts : []
        const texts = parts
          .filter((part) => part?.type === "text" && typeof part.text === "string" && !part.synthetic)
          .map((part) => ({ type: "text", text: part.text.slice(0, PROMPT_CHARS) }))
        // session.created's reply first: the server must see the session start before its
        // first prompt, or both would carry the recovery context. One deadline for both.
        const signal = AbortSignal.timeout(timeoutMs)
        const held = starts.get(sessionID)
        starts.delete(sessionID)
        const startContext = held ? await held : ""
        if (signal.aborted) return
        const body = { hook: "chat.message", input, output: { parts: texts } }
        const promptContext = await post(body, signal, sessionID)
        const context = [startContext, promptContext].filter(Boolean).join("\n\n")
        const first = parts.find((part) => part?.type === "text" && typeof part.text === "string" && !part.synthetic)
        if (context && first) first.text = `${context}${SEPARATOR}${first.text}`
      } catch {
        // never break OpenCode
      }
    },

    "tool.execute.after": async (input) => {
      try {
        const sessionID = input?.sessionID
        if (typeof sessionID !== "string" || !sessionID || children.has(sessionID)) return
        const args = input?.args ?? {}
        let files
        if (typeof args.filePath === "string") files = { filePath: args.filePath }
        else if (typeof args.patchText === "string") files = { patchText: patchHeaders(args.patchText) }
        else return // a tool that changes no file: nothing to send
        const sent = { tool: input.tool, sessionID, callID: input.callID, args: files }
        await post({ hook: "tool.execute.after", input: sent }, undefined, sessionID)
      } catch {
        // never break OpenCode
      }
    },

    "experimental.session.compacting": async (input, output) => {
      try {
        const sessionID = input?.sessionID
        if (typeof sessionID !== "string" || !sessionID || children.has(sessionID)) return
        // One deadline for both requests: the checkpoint first, then the context built on it.
        const signal = AbortSignal.timeout(timeoutMs * 2)
        const hookInput = { sessionID }
        await post({ hook: "experimental.session.compacting", input: hookInput }, signal, sessionID)
        if (signal.aborted) return
        const context = await post({ hook: "signet.compaction.context", input: hookInput }, signal, sessionID)
        if (context && Array.isArray(output?.context)) output.context.push(context)
      } catch {
        // never break OpenCode
      }
    },
  }
}
