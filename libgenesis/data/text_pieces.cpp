#include "libgenesis/data/text_pieces.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "libgenesis/core/error.h"
#include "libgenesis/io/file_util.h"

namespace genesis::data {

namespace fs = std::filesystem;

namespace {

bool visible_ascii(char c) {
  const auto b = static_cast<unsigned char>(c);
  return b > 0x20 && b < 0x7f;
}

// Where a piece may end: at a line break alone between two printable ASCII characters other than
// a space ("x\ny"), just after it.
bool cut_before(const std::string& text, size_t i) {
  return i >= 2 && text[i - 1] == '\n' && visible_ascii(text[i - 2]) && visible_ascii(text[i]);
}

}  // namespace

TextPieces::TextPieces(fs::path path, size_t piece_bytes, size_t max_piece_bytes)
    : path_(std::move(path)),
      in_(path_, std::ios::binary),
      piece_bytes_(std::max<size_t>(piece_bytes, 1)),
      max_piece_bytes_(std::max(max_piece_bytes, piece_bytes_)) {
  GENESIS_CHECK(in_.is_open() && !fs::is_directory(path_), IoError, "cannot read '", path_.string(), "': ",
                fs::is_directory(path_) ? "it is a directory" : std::strerror(errno));
}

void TextPieces::fill(size_t bytes) {
  constexpr size_t kBlock = size_t{4} << 20;
  while (!at_end_ && pending_.size() < bytes) {
    const size_t want = std::min(kBlock, bytes - pending_.size());
    const size_t had = pending_.size();
    pending_.resize(had + want);
    in_.read(pending_.data() + had, static_cast<std::streamsize>(want));
    const auto got = static_cast<size_t>(in_.gcount());
    pending_.resize(had + got);
    if (got < want) {
      GENESIS_CHECK(!in_.bad(), IoError, "cannot read '", path_.string(), "': ", std::strerror(errno));
      at_end_ = true;
    }
  }
}

bool TextPieces::next(std::string& piece) {
  piece.clear();
  size_t cut = 0;
  for (;;) {
    fill(piece_bytes_ == SIZE_MAX ? SIZE_MAX : std::max(piece_bytes_ + 1, scanned_ + 1));
    for (size_t i = std::max<size_t>(scanned_, piece_bytes_ == SIZE_MAX ? pending_.size() : piece_bytes_);
         i < pending_.size(); ++i) {
      if (cut_before(pending_, i)) {
        cut = i;
        break;
      }
    }
    if (cut > 0 || at_end_) break;
    scanned_ = pending_.size();
    GENESIS_CHECK(pending_.size() < max_piece_bytes_, UsageError, "'", path_.string(), "' has ",
                  max_piece_bytes_ >> 20, " MiB without a line break between two lines of text: genesis reads a "
                  "document in pieces cut at such line breaks, so break its lines (or split the file)");
    // Past piece_bytes_ the search goes on in blocks.
    fill(pending_.size() + piece_bytes_);  // a short read marks the end
  }
  if (cut == 0) cut = pending_.size();  // the end of the file
  if (cut == pending_.size()) {
    piece.swap(pending_);
    pending_.clear();
  } else {
    piece.assign(pending_, 0, cut);
    pending_.erase(0, cut);
  }
  scanned_ = 0;
  handed_out_ += piece.size();
  return !piece.empty();
}

}  // namespace genesis::data
