// Signet Continuity for OpenClaw: posts the session's lifecycle to a Signet server and
// prepends the recovery context it answers to the agent's next prompt.
//
// Hooks (api.on): session_start, before_prompt_build, before_compaction, after_compaction,
// session_end. Each posts `{hook, event, ctx, signet}` to `<SIGNET_URL>/api/hooks/openclaw/`
// with `Authorization: Bearer $SIGNET_TOKEN`. Only the event's plain fields are sent (never
// `messages`). At before_compaction the plugin reads the tail of `sessionFile` here, where the
// file is, and sends its facts as `signet.transcript` and `signet.usage`; at after_compaction
// it sends the compaction's summary as `signet.compact_summary`.
//
// OpenClaw never waits long and never breaks: each post has a short timeout (AbortController),
// every error is swallowed and the hook then returns nothing. OpenClaw reads no reply from
// session_start, so a recovery context answered there is held and prepended to the session's
// first prompt.
//
// Settings: SIGNET_URL (else plugin config `url`, else http://127.0.0.1:8000); the token from
// the variable named by plugin config `tokenEnv` (default SIGNET_TOKEN); SIGNET_PREVIOUS_SESSION_KEY
// names the session a new one continues. Standard library only.

import { readTranscript } from "./transcript.js";

export const PLUGIN_ID = "signet-continuity";
export const DEFAULT_URL = "http://127.0.0.1:8000";
export const HOOK_PATH = "/api/hooks/openclaw/";
// Per hook, in ms: the prompt hook sits on the agent's hot path; the pre-compaction post
// writes the checkpoint the next session depends on, so it gets the most.
export const TIMEOUTS = {
  session_start: 3000,
  before_prompt_build: 3000,
  before_compaction: 8000,
  after_compaction: 3000,
  session_end: 2000,
};
const CONTEXT_CAP = 10000;
const REMEMBERED_SESSIONS = 1000;

function plainFields(value) {
  const plain = {};
  if (!value || typeof value !== "object") return plain;
  for (const [key, item] of Object.entries(value)) {
    if (["string", "number", "boolean"].includes(typeof item)) plain[key] = item;
  }
  return plain;
}

function remember(map, key, value) {
  map.delete(key);
  map.set(key, value);
  if (map.size > REMEMBERED_SESSIONS) map.delete(map.keys().next().value);
}

function joinContexts(parts) {
  const text = parts.filter(Boolean).join("\n\n");
  return text.length > CONTEXT_CAP ? text.slice(0, CONTEXT_CAP - 1) : text;
}

/**
 * The plugin, with what it reads from the world passed in (tests give their own).
 * `env`: the environment, read at each post; `fetchImpl`: the fetch to post with.
 */
export function createPlugin({ env = process.env, fetchImpl = globalThis.fetch } = {}) {
  // sessionKey -> the sessionId last seen under it (a hook whose ctx has no sessionId),
  // and sessionId -> the session it continues (session_end's nextSessionId).
  const idByKey = new Map();
  const previousOf = new Map();
  // sessionId -> the context session_start answered, for the session's first prompt.
  const held = new Map();
  let warned = false;

  function settings(config) {
    const tokenEnv = typeof config.tokenEnv === "string" && config.tokenEnv ? config.tokenEnv : "SIGNET_TOKEN";
    const base = env.SIGNET_URL || (typeof config.url === "string" && config.url) || DEFAULT_URL;
    const scale = typeof config.timeoutMs === "number" && config.timeoutMs > 0 ? config.timeoutMs : 0;
    return { url: `${base.replace(/\/+$/, "")}${HOOK_PATH}`, token: env[tokenEnv] || "", scale };
  }

  async function post(config, logger, body) {
    const { url, token, scale } = settings(config);
    if (!token || typeof fetchImpl !== "function") return {};
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(), scale || TIMEOUTS[body.hook] || 3000);
    try {
      const response = await fetchImpl(url, {
        method: "POST",
        headers: { "Content-Type": "application/json", Authorization: `Bearer ${token}` },
        body: JSON.stringify(body),
        signal: controller.signal,
      });
      if (!response.ok) {
        await response.text().catch(() => "");
        throw new Error(`HTTP ${response.status}`);
      }
      const reply = await response.json();
      return reply && typeof reply === "object" ? reply : {};
    } catch (error) {
      if (!warned) {
        warned = true;
        try {
          logger?.warn?.(`signet-continuity: ${url} did not answer (${error?.message ?? error}); continuing without it`);
        } catch {
          // a logger that throws is no reason to break the agent
        }
      }
      return {};
    } finally {
      clearTimeout(timer);
    }
  }

  function sessionIdOf(event, ctx) {
    const id = ctx.sessionId || event.sessionId;
    const key = ctx.sessionKey || event.sessionKey;
    if (typeof id === "string" && id) {
      if (typeof key === "string" && key) remember(idByKey, key, id);
      return id;
    }
    return typeof key === "string" ? idByKey.get(key) || "" : "";
  }

  function payload(hook, rawEvent, rawCtx, signet = {}) {
    const event = plainFields(rawEvent);
    const ctx = plainFields(rawCtx);
    const id = sessionIdOf(event, ctx);
    if (id) ctx.sessionId = id;
    return { hook, event, ctx, signet };
  }

  const handlers = {
    async session_start(config, logger, event, ctx) {
      const body = payload("session_start", event, ctx);
      const id = body.ctx.sessionId;
      const previous = env.SIGNET_PREVIOUS_SESSION_KEY || (id && previousOf.get(id));
      if (previous && previous !== id) body.signet.previous_session_key = previous;
      const reply = await post(config, logger, body);
      if (id && typeof reply.prependContext === "string" && reply.prependContext) {
        remember(held, id, reply.prependContext);
      }
      return undefined;
    },

    async before_prompt_build(config, logger, event, ctx) {
      const body = payload("before_prompt_build", event, ctx);
      const reply = await post(config, logger, body);
      const id = body.ctx.sessionId;
      const first = id ? held.get(id) : undefined;
      if (id) held.delete(id);
      const answered = typeof reply.prependContext === "string" ? reply.prependContext : "";
      const text = joinContexts([first, answered]);
      return text ? { prependContext: text } : undefined;
    },

    async before_compaction(config, logger, event, ctx) {
      const body = payload("before_compaction", event, ctx);
      const facts = await readTranscript(body.event.sessionFile);
      if (facts) {
        body.signet.transcript = facts.transcript;
        if (facts.usage) body.signet.usage = facts.usage;
      }
      await post(config, logger, body);
      return undefined;
    },

    async after_compaction(config, logger, event, ctx) {
      const body = payload("after_compaction", event, ctx);
      const facts = await readTranscript(body.event.sessionFile);
      if (facts && facts.compactSummary) body.signet.compact_summary = facts.compactSummary;
      await post(config, logger, body);
      return undefined;
    },

    async session_end(config, logger, event, ctx) {
      const body = payload("session_end", event, ctx);
      const id = body.ctx.sessionId;
      const next = body.event.nextSessionId;
      if (id && typeof next === "string" && next) remember(previousOf, next, id);
      if (id) held.delete(id);
      await post(config, logger, body);
      return undefined;
    },
  };

  return {
    id: PLUGIN_ID,
    name: "Signet Continuity",
    description: "Checkpoints OpenClaw sessions to a Signet server and restores them after compaction.",
    register(api) {
      const config = (api && api.pluginConfig) || {};
      const logger = api && api.logger;
      for (const [name, handler] of Object.entries(handlers)) {
        const guarded = async (event, ctx) => {
          try {
            return await handler(config, logger, event || {}, ctx || {});
          } catch {
            return undefined;
          }
        };
        // OpenClaw's own limit, a second over ours: the post has given up by then.
        const own = typeof config.timeoutMs === "number" && config.timeoutMs > 0 ? config.timeoutMs : TIMEOUTS[name];
        api.on(name, guarded, { timeoutMs: own + 1000 });
      }
    },
  };
}

export default createPlugin();
