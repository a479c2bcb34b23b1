#include "http/choice_exchange.h"

#include <chrono>

namespace autouvm::http {

class ChoiceExchange::Sink final : public engine::GenerationSink {
 public:
  Sink(ChoiceExchange* exchange, int index) : exchange_(exchange), index_(index) {}

  void OnToken(const engine::GeneratedToken& token) override {
    const auto now = std::chrono::steady_clock::now();
    if (exchange_->observer_ != nullptr && tokens_++ > 0) {
      exchange_->observer_->TokenGap(exchange_->model_, std::chrono::duration<double>(now - last_).count());
    }
    last_ = now;
    ChoiceEvent e;
    e.choice = index_;
    e.token = token;
    exchange_->Push(std::move(e));
  }

  void OnFinish(const std::string& tail, const engine::GenerationResult& result) override {
    // Note [Who keeps the exchange]: this reference may be the last one.
    std::shared_ptr<ChoiceExchange> keep = exchange_->shared_from_this();
    if (keep->observer_ != nullptr) keep->observer_->CallEnded(keep->model_, result.status.code(), &result);
    ChoiceEvent e;
    e.choice = index_;
    e.finished = true;
    e.tail = tail;
    e.result = result;
    keep->Push(std::move(e));
  }

 private:
  ChoiceExchange* const exchange_;
  const int index_;
  int64_t tokens_ = 0;
  std::chrono::steady_clock::time_point last_;
};

struct ChoiceExchange::Choice {
  Choice(const engine::GenerationFrontend* frontend, ChoiceExchange* exchange, int index)
      : call(frontend), sink(exchange, index) {}
  engine::GenerationCall call;
  Sink sink;
};

ChoiceExchange::ChoiceExchange(const engine::GenerationFrontend* frontend, CallObserver* observer)
    : frontend_(frontend), observer_(observer) {}

ChoiceExchange::~ChoiceExchange() = default;

std::shared_ptr<ChoiceExchange> ChoiceExchange::Create(const engine::GenerationFrontend* frontend,
                                                       CallObserver* observer) {
  return std::shared_ptr<ChoiceExchange>(new ChoiceExchange(frontend, observer));
}

absl::Status ChoiceExchange::Submit(std::vector<engine::GenerationRequest> requests, const engine::FieldNames& names) {
  // Read by the sinks on the scheduler threads: set before the first call is admitted.
  if (!requests.empty()) model_ = requests[0].model;
  choices_.reserve(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    choices_.push_back(std::make_unique<Choice>(frontend_, this, static_cast<int>(i)));
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    Choice& c = *choices_[i];
    {
      absl::MutexLock lock(&mu_);
      ++running_;  // before Submit: the scheduler may finish it before Submit returns
    }
    absl::Status s = c.call.Submit(std::move(requests[i]), names, &c.sink);
    if (i == 0) request_id_ = c.call.request_id();
    if (!s.ok()) {
      {
        absl::MutexLock lock(&mu_);
        --running_;
      }
      if (observer_ != nullptr) observer_->CallEnded(c.call.model(), s.code(), nullptr);
      CancelAll();
      WaitFinished();
      absl::MutexLock lock(&mu_);
      events_.clear();
      return s;
    }
  }
  return absl::OkStatus();
}

void ChoiceExchange::Push(ChoiceEvent event) {
  absl::MutexLock lock(&mu_);
  if (event.finished) --running_;
  events_.push_back(std::move(event));
}

std::vector<ChoiceEvent> ChoiceExchange::Next(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !events_.empty() || running_ == 0; };
  mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
  std::vector<ChoiceEvent> out(std::make_move_iterator(events_.begin()), std::make_move_iterator(events_.end()));
  events_.clear();
  return out;
}

bool ChoiceExchange::drained() const {
  absl::MutexLock lock(&mu_);
  return running_ == 0 && events_.empty();
}

void ChoiceExchange::CancelAll() {
  for (auto& c : choices_) c->call.Cancel();
}

void ChoiceExchange::WaitFinished() {
  absl::MutexLock lock(&mu_);
  auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return running_ == 0; };
  mu_.Await(absl::Condition(&done));
}

}  // namespace autouvm::http
