#pragma once
// A text file read in pieces, so that `genesis data tokenize` and `data encode` hold a bounded
// part of a multi-gigabyte document, never all of it.
//
// Each piece but the last ends just after a line break that stands alone between two printable
// ASCII characters other than a space ("x\ny"). No pre-tokenizer of the byte-level BPE families
// genesis reads (GPT-2's pattern; Llama 3's and Qwen2's) makes a word of bytes on both sides of
// such a point: the line break is a whitespace run of its own, which a word, a number or a
// punctuation run never starts with, and which is no longer at the end of a piece than in the
// whole text (GPT-2's `\s+(?!\S)` would take a longer run at a piece's end whole). So the pieces'
// encodings, concatenated, are the whole text's (tests/test_text_pieces.cpp checks this on the
// three patterns). A tokenizer that puts a
// space before its text (add_prefix_space) is the exception: Tokenizer::encodes_pieces() says
// so, and its documents are read whole.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

namespace genesis::data {

// A piece holds at least this much (the last one excepted).
inline constexpr size_t kTextPieceBytes = size_t{16} << 20;
// Past this without a point to cut at, the file is refused (a document of one endless line).
inline constexpr size_t kMaxTextPieceBytes = size_t{256} << 20;

class TextPieces {
 public:
  // piece_bytes = SIZE_MAX reads the file as one piece, whatever its size.
  explicit TextPieces(std::filesystem::path path, size_t piece_bytes = kTextPieceBytes,
                      size_t max_piece_bytes = kMaxTextPieceBytes);
  // The next piece into `piece` (its old content replaced); false once the file is exhausted.
  // IoError when it cannot be read; UsageError when max_piece_bytes pass without a cut.
  bool next(std::string& piece);
  // Bytes handed out as pieces so far.
  uint64_t bytes_read() const { return handed_out_; }

 private:
  // Reads until pending_ holds `bytes` or the file ends.
  void fill(size_t bytes);

  std::filesystem::path path_;
  std::ifstream in_;
  size_t piece_bytes_, max_piece_bytes_;
  std::string pending_;
  size_t scanned_ = 0;  // pending_[0, scanned_) holds no cut at or past piece_bytes_
  bool at_end_ = false;
  uint64_t handed_out_ = 0;
};

}  // namespace genesis::data
