#pragma once
// One turn of a conversation, as chat datasets ({"messages": [{"role", "content"}, ...]}) and
// chat templates (data/chat_template.h) hold it.
#include <string>
#include <vector>

namespace genesis::data {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant" (templates may know others, e.g. "tool")
  std::string content;
  friend bool operator==(const ChatMessage&, const ChatMessage&) = default;
};

using Conversation = std::vector<ChatMessage>;

}  // namespace genesis::data
