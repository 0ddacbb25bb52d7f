// Overloaded: a visitor made of lambdas, for std::visit over a std::variant.
//
//   std::visit(Overloaded{[](const StepEvent& s) { ... }, [](const auto&) { ... }}, event);
#pragma once

namespace stagecraft {

template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};
template <class... F>
Overloaded(F...) -> Overloaded<F...>;

}  // namespace stagecraft
