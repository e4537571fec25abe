// libFuzzer harness: SFT JSON Lines files (data::SftReader). The first byte picks the format
// (auto, messages, prompt_completion, text) and whether the file is named .jsonl.gz (bit 2: the
// bytes then meet the gzip reader); the rest is the file. Every record is read twice, without
// and with skip_bad: bad records must end in a genesis error (or be counted as skipped).
#include "libgenesis/data/sft_records.h"
#include "tests/fuzz/fuzz_common.h"

using namespace genesis;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static constexpr data::SftFormat kFormats[] = {data::SftFormat::automatic, data::SftFormat::messages,
                                                 data::SftFormat::prompt_completion, data::SftFormat::text};
  const data::SftFormat format = kFormats[data[0] % 4];
  const char* name = (data[0] & 4) != 0 ? "records.jsonl.gz" : "records.jsonl";
  const std::filesystem::path path = fuzz::write_input(name, fuzz::as_text(data + 1, size - 1));
  for (const bool skip_bad : {false, true}) {
    fuzz::expect_clean([&] {
      data::SftReader reader({path}, format, skip_bad);
      while (const std::optional<data::SftRecord> record = reader.next()) {
        if (record->format == data::SftFormat::messages && record->messages.empty())
          fuzz::finding("a messages record without turns", record->where);
      }
      if (reader.bytes_read() > reader.total_bytes()) fuzz::finding("read more bytes than the file has", name);
    });
  }
  return 0;
}
