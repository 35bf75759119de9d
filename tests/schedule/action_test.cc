#include "schedule/action.h"

#include <gtest/gtest.h>

namespace bw::schedule {
namespace {

TEST(Action, TextFormRoundTripsForEveryKind) {
  for (auto kind : {ActionKind::F, ActionKind::B, ActionKind::I, ActionKind::W, ActionKind::SEND_F,
                    ActionKind::RECV_F, ActionKind::SEND_B, ActionKind::RECV_B}) {
    const Action a{kind, 13, 207};
    const auto text = to_string(a);
    auto back = parse_action(text);
    ASSERT_TRUE(back.has_value()) << text;
    EXPECT_EQ(*back, a) << text;
  }
  EXPECT_EQ(to_string({ActionKind::F, 3, 1}), "3F1");
  EXPECT_EQ(to_string({ActionKind::SEND_B, 5, 2}), "5SEND_B2");
}

TEST(Action, RejectsMalformedText) {
  for (const char* bad : {"", "F1", "3F", "3X1", "-3F1", "3F-1", "3 F1", "3SEND1", "a3F1"})
    EXPECT_FALSE(parse_action(bad).has_value()) << bad;
}

}  // namespace
}  // namespace bw::schedule
