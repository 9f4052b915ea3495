// Bounded reader for OpenClaw session transcripts (pi-agent JSONL v3, `<sessionId>.jsonl`).
//
// It runs inside the OpenClaw gateway, on the agent's machine, where the file is: the server
// never opens a file a request names. `readTranscript(path)` returns what the plugin sends as
// `signet.transcript` (and `signet.usage`, `signet.compact_summary`), or null.
//
// Only the tail of the file is read (2 MiB by default), every line is parsed on its own, and
// a line that is not what we expect is skipped: a half-written or corrupted transcript yields
// whatever facts its readable lines hold. Nothing here throws.

import { open } from "node:fs/promises";

export const DEFAULT_MAX_BYTES = 2 * 1024 * 1024;
const MAX_PROMPTS = 10;
const PROMPT_CHARS = 500;
const MESSAGE_CHARS = 2000;
const MAX_MODIFIED_FILES = 50;
const MAX_PATH_CHARS = 4096;
const SUMMARY_CHARS = 20000;
// OpenClaw's file-changing tools, and the argument naming the file.
const EDIT_TOOLS = new Set(["write", "edit"]);
// Replies that say "nothing to tell the user": the silent memory-flush and heartbeat turns.
const SILENT_REPLIES = new Set(["NO_REPLY", "HEARTBEAT_OK"]);
// The default prompt of the silent turn OpenClaw runs before an auto-compaction.
const FLUSH_PREFIX = "Pre-compaction memory flush";
// The channel envelope OpenClaw puts before a message: "[Telegram Alice id:1 +2m 2026-08-18 16:02 CEST] ".
const ENVELOPE = /^\[[^\]\n]*\d{4}-\d{2}-\d{2}[^\]\n]*\]\s*/;

function clip(text, limit) {
  const trimmed = text.trim();
  if (trimmed.length <= limit) return trimmed;
  return `${trimmed.slice(0, limit - 1).trimEnd()}…`;
}

function textOf(content) {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content
    .filter((block) => block && block.type === "text" && typeof block.text === "string")
    .map((block) => block.text)
    .join("\n");
}

function count(value) {
  return typeof value === "number" && Number.isFinite(value) && value >= 0 ? value : 0;
}

/** Running state over the lines: holds only the facts, never the lines. */
class Reader {
  constructor() {
    this.prompts = [];
    this.lastUserRequest = "";
    this.modified = new Map(); // insertion-ordered: re-touching a file moves it to the end
    this.lastAssistantMessage = "";
    this.model = "";
    this.contextTokens = null;
    this.compactions = 0;
    this.compactSummary = "";
    this.inFlush = false;
  }

  feed(record) {
    if (record.type === "message" && record.message && typeof record.message === "object") {
      const { role } = record.message;
      if (role === "user") this.user(record.message);
      else if (role === "assistant") this.assistant(record.message);
    } else if (record.type === "compaction") {
      this.compactions += 1;
      this.contextTokens = null; // the next response counts the compacted context
      if (typeof record.summary === "string") {
        this.compactSummary = clip(record.summary, SUMMARY_CHARS);
      }
      const files = record.details && record.details.modifiedFiles;
      if (Array.isArray(files)) files.forEach((path) => this.touch(path));
    } else if (record.type === "model_change" && typeof record.modelId === "string") {
      this.model = record.modelId;
    }
  }

  user(message) {
    const text = textOf(message.content).trim();
    if (!text) return;
    if (text.startsWith(FLUSH_PREFIX)) {
      this.inFlush = true; // a silent housekeeping turn, not the person's request
      return;
    }
    this.inFlush = false;
    const request = text.replace(ENVELOPE, "").trim() || text;
    this.lastUserRequest = clip(request, MESSAGE_CHARS);
    this.prompts.push(clip(request, PROMPT_CHARS));
    if (this.prompts.length > MAX_PROMPTS) this.prompts.shift();
  }

  assistant(message) {
    if (typeof message.model === "string" && message.model) this.model = message.model;
    const usage = message.usage;
    if (usage && typeof usage === "object") {
      const tokens = count(usage.input) + count(usage.cacheRead) + count(usage.cacheWrite);
      if (tokens > 0) this.contextTokens = Math.round(tokens);
    }
    if (this.inFlush || !Array.isArray(message.content)) return;
    for (const block of message.content) {
      if (!block || typeof block !== "object") continue;
      if (block.type === "text" && typeof block.text === "string") {
        const text = block.text.trim();
        if (text && !SILENT_REPLIES.has(text)) {
          this.lastAssistantMessage = clip(text, MESSAGE_CHARS);
        }
      } else if (block.type === "toolCall" && EDIT_TOOLS.has(block.name)) {
        const args = block.arguments;
        if (args && typeof args === "object") this.touch(args.path ?? args.file_path);
      }
    }
  }

  touch(path) {
    if (typeof path !== "string" || !path || path.length > MAX_PATH_CHARS) return;
    this.modified.delete(path);
    this.modified.set(path, null);
    if (this.modified.size > MAX_MODIFIED_FILES) {
      this.modified.delete(this.modified.keys().next().value);
    }
  }

  facts(truncated) {
    return {
      transcript: {
        current_task: this.lastUserRequest,
        todos: [],
        recent_prompts: [...this.prompts],
        modified_files: [...this.modified.keys()],
        last_assistant_message: this.lastAssistantMessage,
        git_branch: "",
        context_tokens: this.contextTokens,
      },
      usage:
        this.contextTokens === null
          ? null
          : { context_tokens: this.contextTokens, model: this.model },
      compactSummary: this.compactSummary,
      compactions: this.compactions,
      truncated,
    };
  }
}

/** Facts from transcript lines in file order; unreadable lines are skipped. */
export function parseLines(lines, truncated = false) {
  const reader = new Reader();
  for (const line of lines) {
    if (typeof line !== "string") continue;
    const trimmed = line.trim();
    if (!trimmed.startsWith("{")) continue;
    let record;
    try {
      record = JSON.parse(trimmed);
    } catch {
      continue;
    }
    if (!record || typeof record !== "object" || Array.isArray(record)) continue;
    try {
      reader.feed(record);
    } catch {
      // A line of an unexpected shape: skipped like a line of bad JSON.
    }
  }
  return reader.facts(truncated);
}

/**
 * Facts from the last `maxBytes` of the transcript at `path`, or null when it cannot be read.
 * When only the tail is read, the partial line the cut lands in is dropped.
 */
export async function readTranscript(path, { maxBytes = DEFAULT_MAX_BYTES } = {}) {
  if (typeof path !== "string" || !path || path.includes("\0")) return null;
  let handle;
  try {
    handle = await open(path, "r");
    const info = await handle.stat();
    if (!info.isFile()) return null;
    const length = Math.min(info.size, maxBytes);
    const start = info.size - length;
    const buffer = Buffer.alloc(length);
    let read = 0;
    while (read < length) {
      const { bytesRead } = await handle.read(buffer, read, length - read, start + read);
      if (bytesRead === 0) break;
      read += bytesRead;
    }
    let lines = buffer.subarray(0, read).toString("utf8").split("\n");
    if (start > 0) lines = lines.slice(1);
    return parseLines(lines, start > 0);
  } catch {
    return null;
  } finally {
    if (handle) await handle.close().catch(() => {});
  }
}
