// The page: voices from /v1/audio/voices; "Speak" streams audio from POST /v1/audio/speech (pcm)
// or, word by word, over the WebSocket /v1/audio/speech/stream. window.ttsStats holds what the
// page measured (read by tests/test_http_page_browser.py).
"use strict";

const $ = (id) => document.getElementById(id);
const RATE_HZ = 24000;
const stats = window.ttsStats = { runs: 0, done: 0, samplesScheduled: 0, ttfaMs: null, rtf: null, audioS: 0,
                                  error: null, mode: null, summary: null };
let modelType = null, player = null, abort = null;

function show(id, text) { $(id).textContent = text; }
function setStatus(text, isError) { const s = $("status"); s.textContent = text; s.className = isError ? "error" : "muted"; }

async function loadVoices() {
  const reply = await fetch("/v1/audio/voices");
  const body = await reply.json();
  if (!reply.ok) throw new Error(body.error ? body.error.message : reply.statusText);
  modelType = body.model_type;
  show("model", `${body.model} (${modelType.replace("_", " ")})`);
  const select = $("voice");
  select.innerHTML = "";
  for (const v of body.voices) select.add(new Option(v.kind === "registered" ? `${v.name} (clone)` : v.name, v.id));
  if (modelType === "voice_design") select.add(new Option("described below", "design"));
  select.disabled = modelType === "voice_design";
  const language = $("language");
  language.length = 1;
  for (const name of body.languages) language.add(new Option(name, name));
  const label = { custom_voice: "How to speak (optional)", voice_design: "Describe the voice",
                  base: "Instructions (not used by Base models)" }[modelType];
  show("instructions-label", label);
  $("instructions").disabled = modelType === "base" || !body.supports_instructions && modelType !== "voice_design";
  if (modelType === "voice_design") $("instructions").value ||= "A calm, warm female voice, speaking clearly.";
  $("register").hidden = modelType !== "base";
  setStatus(body.voices.length || modelType === "voice_design" ? "ready" : "register a voice first");
}

function request() {
  return { voice: $("voice").value, instructions: $("instructions").value, language: $("language").value,
           response_format: "pcm" };
}

function started(t0) {
  if (stats.ttfaMs === null) { stats.ttfaMs = performance.now() - t0; show("ttfa", `${stats.ttfaMs.toFixed(0)} ms`); }
}

function received(bytes, t0) {
  started(t0);
  player.push(bytes);
  stats.samplesScheduled = player.samplesScheduled;
  stats.audioS = player.samplesScheduled / RATE_HZ;
  show("samples", String(player.samplesScheduled));
  show("audio-s", `${stats.audioS.toFixed(2)} s`);
}

function finish(t0, summary) {
  const wallS = (performance.now() - t0) / 1000;
  stats.rtf = stats.audioS ? wallS / stats.audioS : null;
  show("rtf", stats.rtf === null ? "-" : stats.rtf.toFixed(3));
  if (summary) {
    stats.summary = summary;
    show("server", `TTFA ${summary.time_to_first_audio_ms.toFixed(0)} ms, ${summary.num_frames} frames, ` +
                   `finish: ${summary.finish_reason}`);
  }
  stats.done += 1;
  setStatus("done");
}

async function speakHttp(text, t0) {
  abort = new AbortController();
  const reply = await fetch("/v1/audio/speech", { method: "POST", headers: { "Content-Type": "application/json" },
                                                  body: JSON.stringify({ ...request(), input: text }),
                                                  signal: abort.signal });
  if (!reply.ok) { const body = await reply.json(); throw new Error(`${reply.status}: ${body.error.message}`); }
  const reader = reply.body.getReader();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    received(value, t0);
  }
  finish(t0, null);
}

function speakWebSocket(text, t0) {
  return new Promise((resolve, reject) => {
    const socket = new WebSocket(`${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/v1/audio/speech/stream`);
    socket.binaryType = "arraybuffer";
    abort = { abort: () => socket.close() };
    let summary = null;
    socket.onopen = async () => {
      socket.send(JSON.stringify({ type: "config", ...request() }));
      // Word by word with a pause, as tokens from an LLM arrive.
      for (const word of text.match(/\S+\s*/g) || []) {
        if (socket.readyState !== WebSocket.OPEN) return;
        socket.send(JSON.stringify({ type: "text", text: word }));
        await new Promise((r) => setTimeout(r, 40));
      }
      if (socket.readyState === WebSocket.OPEN) socket.send(JSON.stringify({ type: "end" }));
    };
    socket.onmessage = (event) => {
      if (event.data instanceof ArrayBuffer) { received(new Uint8Array(event.data), t0); return; }
      const message = JSON.parse(event.data);
      if (message.type === "summary") summary = message;
      if (message.type === "error") reject(new Error(`${message.status}: ${message.error.message}`));
    };
    socket.onclose = (event) => {
      if (event.code === 1000) { finish(t0, summary); resolve(); } else reject(new Error(`closed (${event.code})`));
    };
  });
}

async function speak() {
  const text = $("text").value;
  const mode = document.querySelector("input[name=mode]:checked").value;
  if (player) player.stop();
  player = new PcmPlayer(RATE_HZ);
  Object.assign(stats, { runs: stats.runs + 1, samplesScheduled: 0, ttfaMs: null, rtf: null, audioS: 0, error: null,
                         mode, summary: null });
  ["ttfa", "rtf", "audio-s", "server"].forEach((id) => show(id, "-"));
  show("samples", "0");
  $("speak").disabled = true; $("stop").disabled = false;
  setStatus(mode === "ws" ? "sending words..." : "speaking...");
  const t0 = performance.now();
  try {
    await (mode === "ws" ? speakWebSocket(text, t0) : speakHttp(text, t0));
  } catch (error) {
    if (error.name !== "AbortError") { stats.error = error.message; setStatus(error.message, true); }
  } finally {
    $("speak").disabled = false; $("stop").disabled = true;
  }
}

async function registerVoice(event) {
  event.preventDefault();
  show("register-status", "uploading...");
  const reply = await fetch("/v1/audio/voices", { method: "POST", body: new FormData($("register")) });
  const body = await reply.json();
  show("register-status", reply.ok ? `registered ${body.id}` : body.error.message);
  if (reply.ok) await loadVoices();
}

$("speak").addEventListener("click", speak);
$("stop").addEventListener("click", () => { if (abort) abort.abort(); if (player) player.stop(); setStatus("stopped"); });
$("register").addEventListener("submit", registerVoice);
loadVoices().catch((error) => setStatus(`voices: ${error.message}`, true));
