// Prints gpt-3-encoder's GPT-2 token ids of a file, separated by spaces.
//   node tests/cli/gpt3_encoder_ids.js PATH/TO/Encoder.js FILE
// Its encode() concatenates arrays token by token (quadratic on a whole book), so the text is
// encoded in pieces cut just before a " " that follows a non-space and precedes an ASCII letter:
// the GPT-2 pattern starts a new " ?\p{L}+" token there, so the pieces' ids concatenate to the
// ids of the whole text.
const { encode } = require(process.argv[2]);
const text = require("fs").readFileSync(process.argv[3], "utf8");
const ids = [];
let start = 0;
while (start < text.length) {
  let end = Math.min(start + 8192, text.length);
  while (end < text.length && !(text[end] === " " && /\S/.test(text[end - 1]) && /[A-Za-z]/.test(text[end + 1] || ""))) end++;
  for (const id of encode(text.slice(start, end))) ids.push(id);
  start = end;
}
process.stdout.write(ids.join(" ") + "\n");
