// libFuzzer harness: a chat template (data::ChatTemplate, the Jinja interpreter of data/jinja.h)
// as a model's tokenizer_config.json brings it. The first byte picks add_generation_prompt (bit
// 0) and whether assistant_spans runs too (bit 1); the rest is the template's text. A template
// that parses renders a fixed conversation (system, user, assistant, user, assistant: UTF-8,
// quotes, braces) with bos/eos tokens and a date_string. Parse and render errors must be
// genesis errors; the render must stay within the interpreter's limits of time and memory.
#include "libgenesis/data/chat_template.h"
#include "tests/fuzz/fuzz_common.h"

using namespace genesis;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool add_generation_prompt = (data[0] & 1) != 0;
  const bool spans = (data[0] & 2) != 0;
  const std::string_view source = fuzz::as_text(data + 1, size - 1);
  static const data::Conversation messages = {
      {"system", "You are terse."},
      {"user", "Hi! {{ not a tag }} \xc3\xbc\xc3\xb1\xc3\xaf \xf0\x9f\x99\x82"},
      {"assistant", "Hello 'there' \"friend\"."},
      {"user", "2 + 2?\n\n"},
      {"assistant", "4"},
  };
  static const std::map<std::string, std::string> extra = {{"date_string", "26 Jul 2024"}};
  fuzz::expect_clean([&] {
    const data::ChatTemplate chat_template = data::ChatTemplate::parse(source, "fuzz", "<s>", "</s>");
    (void)chat_template.render(messages, add_generation_prompt, extra);
    if (spans) {
      for (const auto& [begin, end] : data::assistant_spans(chat_template, messages, extra))
        if (begin > end) fuzz::finding("an assistant span that ends before it begins", std::to_string(begin));
    }
  });
  return 0;
}
