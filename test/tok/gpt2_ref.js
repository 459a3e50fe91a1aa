// Reference side of test_gpt2_vs_js.py and bench/tok: encode each
// NUL-separated document of a file with the reference Encoder.js and print
// its ids, one line per document.
//   node gpt2_ref.js ENCODER_JS FILE [--time]
const enc = require(process.argv[2]);
const fs = require('fs');
const text = fs.readFileSync(process.argv[3], 'utf8');
const docs = text.split('\0');
const t0 = process.hrtime.bigint();
const out = docs.map(d => enc.encode(d));
const t1 = process.hrtime.bigint();
if (process.argv[4] === '--time') {
  let n = 0;
  for (const o of out) n += o.length;
  console.log(JSON.stringify({ seconds: Number(t1 - t0) / 1e9, tokens: n,
                               bytes: Buffer.byteLength(text, 'utf8') }));
} else {
  process.stdout.write(out.map(o => o.join(' ')).join('\n') + '\n');
}
