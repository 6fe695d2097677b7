// hf_encode.js - the Hugging Face tokenizers engine (Rust, @anush008/tokenizers) as the
// oracle of qtrain-data (tests/e2e/56_tokenizer.sh, make bench-tokenizer).
//
//   node hf_encode.js compare TOKENIZER.json CORPUS.jsonl OURS.tok EOS_ID
//       encodes the "text" of every line with encode(text, null, {addSpecialTokens: false}),
//       one document at a time, and compares the ids with the QTTOKENS file OURS.tok (each
//       document's ids followed by EOS_ID); prints "N documents, M ids compared, K
//       mismatches" and, for the first mismatching document, where and with what context;
//       exit 1 on any mismatch.
//   node hf_encode.js bench TOKENIZER.json CORPUS.jsonl
//       the same encoding, timed: prints "hf: BYTES bytes TOKENS tokens SECONDS s".
// Single-threaded: run with RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false; documents go
// one by one through encode(), never encodeBatch.
'use strict';
const fs = require('fs');
const path = require('path');
const { Tokenizer } = require(path.resolve(process.env.QT_NPM || 'build/npm', 'node_modules/@anush008/tokenizers'));

function docs(file) {
  return fs.readFileSync(file, 'utf8').split('\n').filter((l) => l.trim() !== '').map((l) => JSON.parse(l).text);
}

function readTok(file) {
  const b = fs.readFileSync(file);
  if (b.toString('latin1', 0, 8) !== 'QTTOKENS' || b.readUInt32LE(12) !== 4) throw new Error(file + ': not a 4-byte QTTOKENS file');
  const n = Number(b.readBigUInt64LE(16));
  const hdr = b.readUInt32LE(8) === 2 ? 32 : 24; // version 2 records the end-of-document id
  const ids = new Uint32Array(n);
  for (let i = 0; i < n; i++) ids[i] = b.readUInt32LE(hdr + 4 * i);
  return ids;
}

async function compare(tokFile, corpus, ours, eos) {
  const tk = Tokenizer.fromFile(tokFile);
  const texts = docs(corpus);
  const mine = readTok(ours);
  let at = 0, compared = 0, bad = 0, first = null;
  for (let d = 0; d < texts.length; d++) {
    const enc = await tk.encode(texts[d], null, { addSpecialTokens: false });
    const ref = enc.getIds().concat(eos >= 0 ? [eos] : []);
    let k = 0;
    for (; k < ref.length && at + k < mine.length; k++) if (mine[at + k] !== ref[k]) break;
    compared += Math.min(ref.length, mine.length - at);
    if (k < ref.length) {
      bad++;
      if (!first) first = { d, k, ref, got: Array.from(mine.slice(at, at + ref.length + 8)), toks: enc.getTokens(), text: texts[d] };
      // resynchronise on the EOS that ends this document in ours
      let j = at;
      while (j < mine.length && mine[j] !== eos) j++;
      at = j + 1;
    } else at += ref.length;
  }
  if (at !== mine.length) { bad++; console.log(`ours has ${mine.length - at} ids after the last document`); }
  console.log(`${texts.length} documents, ${compared} ids compared, ${bad} mismatches`);
  if (first) {
    const { d, k, ref, got, toks, text } = first;
    const lo = Math.max(0, k - 5);
    console.log(`first mismatch: document ${d + 1}, id ${k}:`);
    console.log(`  hf:   ${ref.slice(lo, k + 6).join(' ')}   tokens ${JSON.stringify(toks.slice(lo, k + 6))}`);
    console.log(`  ours: ${got.slice(lo, k + 6).join(' ')}`);
    const start = toks.slice(0, lo).join('').length;
    console.log(`  text near it (approx.): ${JSON.stringify(text.slice(Math.max(0, start - 20), start + 60))}`);
    process.exit(1);
  }
}

async function bench(tokFile, corpus) {
  const tk = Tokenizer.fromFile(tokFile);
  const texts = docs(corpus);
  let bytes = 0, tokens = 0;
  const t0 = process.hrtime.bigint();
  for (const t of texts) {
    const enc = await tk.encode(t, null, { addSpecialTokens: false });
    tokens += enc.getLength() + 1;
    bytes += Buffer.byteLength(t, 'utf8');
  }
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  console.log(`hf: ${bytes} bytes ${tokens} tokens ${s.toFixed(3)} s`);
}

const [mode, ...a] = process.argv.slice(2);
(mode === 'compare' ? compare(a[0], a[1], a[2], Number(a[3])) : mode === 'bench' ? bench(a[0], a[1]) : Promise.reject(new Error('usage: compare|bench ...')))
  .catch((e) => { console.error(e.message); process.exit(2); });
