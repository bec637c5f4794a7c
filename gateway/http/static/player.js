// Gapless playback of 16-bit PCM chunks with Web Audio: each chunk is scheduled right after the
// previous one on the audio clock, whatever size the network cut it into.
"use strict";

class PcmPlayer {
  constructor(sampleRateHz) {
    this.sampleRateHz = sampleRateHz;
    this.context = new AudioContext({ sampleRate: sampleRateHz });
    this.nextStartS = 0;
    this.leftover = null;          // an odd trailing byte of the last chunk
    this.samplesScheduled = 0;
    this.sources = [];
  }

  // bytes: a Uint8Array of little-endian int16 samples, cut anywhere
  push(bytes) {
    if (this.leftover !== null) {
      const joined = new Uint8Array(bytes.length + 1);
      joined[0] = this.leftover; joined.set(bytes, 1); bytes = joined; this.leftover = null;
    }
    if (bytes.length % 2) { this.leftover = bytes[bytes.length - 1]; bytes = bytes.subarray(0, bytes.length - 1); }
    const count = bytes.length / 2;
    if (!count) return 0;
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.length);
    const buffer = this.context.createBuffer(1, count, this.sampleRateHz);
    const channel = buffer.getChannelData(0);
    for (let i = 0; i < count; i++) channel[i] = view.getInt16(2 * i, true) / 32768;
    const source = this.context.createBufferSource();
    source.buffer = buffer;
    source.connect(this.context.destination);
    // A small lead keeps the first chunk from starting in the past.
    const startS = Math.max(this.nextStartS, this.context.currentTime + 0.03);
    source.start(startS);
    this.nextStartS = startS + buffer.duration;
    this.samplesScheduled += count;
    this.sources.push(source);
    return count;
  }

  stop() {
    for (const source of this.sources) { try { source.stop(); } catch (e) { /* already ended */ } }
    this.sources = [];
    this.context.close();
  }
}
window.PcmPlayer = PcmPlayer;
