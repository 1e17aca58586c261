#include "tandem/kernels/tensor.h"

#include <fmt/format.h>

#include "tandem/core/error.h"
#include "tandem/kernels/backend.h"

namespace tandem::kernels {

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return 4;
    case DType::bf16:
      return 2;
    case DType::i64:
      return 8;
  }
  return 0;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "f32";
    case DType::bf16:
      return "bf16";
    case DType::i64:
      return "i64";
  }
  return "?";
}

Shape::Shape(std::initializer_list<std::int64_t> dims) {
  TANDEM_CHECK(dims.size() <= kMaxRank, "a tensor has at most {} dimensions, got {}", kMaxRank,
               dims.size());
  for (std::int64_t d : dims) {
    TANDEM_CHECK(d >= 0, "tensor dimensions must be >= 0, got {}", d);
    dims_[static_cast<std::size_t>(rank_++)] = d;
  }
}

std::int64_t Shape::numel() const {
  std::int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= dims_[static_cast<std::size_t>(i)];
  return n;
}

bool Shape::operator==(const Shape& other) const {
  if (rank_ != other.rank_) return false;
  for (int i = 0; i < rank_; ++i)
    if (dims_[static_cast<std::size_t>(i)] != other.dims_[static_cast<std::size_t>(i)])
      return false;
  return true;
}

std::vector<std::int64_t> Shape::dims() const {
  return std::vector<std::int64_t>(dims_.begin(), dims_.begin() + rank_);
}

std::string Shape::str() const {
  std::string s = "[";
  for (int i = 0; i < rank_; ++i)
    s += (i ? ", " : "") + std::to_string(dims_[static_cast<std::size_t>(i)]);
  return s + "]";
}

void Tensor::check_dtype(DType expected) const {
  TANDEM_CHECK(dtype_ == expected, "tensor {} accessed as {}", str(), dtype_name(expected));
}

Tensor Tensor::reshape(Shape shape) const {
  TANDEM_CHECK(shape.numel() == numel(), "cannot reshape {} to {}", str(), shape.str());
  return Tensor(data_, dtype_, shape);
}

Tensor Tensor::view(std::int64_t offset, Shape shape) const {
  TANDEM_CHECK(offset >= 0 && offset + shape.numel() <= numel(),
               "view of {} elements at {} outside {}", shape.numel(), offset, str());
  auto* base = static_cast<char*>(data_);
  return Tensor(base + static_cast<std::size_t>(offset) * dtype_size(dtype_), dtype_, shape);
}

Tensor Tensor::rows(std::int64_t begin, std::int64_t end) const {
  TANDEM_CHECK(rank() >= 1 && begin >= 0 && begin <= end && end <= dim(0),
               "rows [{}, {}) outside {}", begin, end, str());
  const std::int64_t row = dim(0) > 0 ? numel() / dim(0) : 0;
  Shape s;
  switch (rank()) {
    case 1:
      s = Shape{end - begin};
      break;
    case 2:
      s = Shape{end - begin, dim(1)};
      break;
    case 3:
      s = Shape{end - begin, dim(1), dim(2)};
      break;
    default:
      s = Shape{end - begin, dim(1), dim(2), dim(3)};
      break;
  }
  return view(begin * row, s);
}

std::string Tensor::str() const { return fmt::format("{}{}", dtype_name(dtype_), shape_.str()); }

Buffer::Buffer(Backend* backend, DType dtype, Shape shape) : backend_(backend) {
  const std::size_t bytes = static_cast<std::size_t>(shape.numel()) * dtype_size(dtype);
  void* data = bytes > 0 ? backend_->do_allocate(bytes) : nullptr;
  tensor_ = Tensor(data, dtype, shape);
  if (data) backend_->count_allocation(static_cast<std::int64_t>(bytes));
}

Buffer::~Buffer() { release(); }

Buffer::Buffer(Buffer&& other) noexcept : backend_(other.backend_), tensor_(other.tensor_) {
  other.backend_ = nullptr;
  other.tensor_ = Tensor();
}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    release();
    backend_ = other.backend_;
    tensor_ = other.tensor_;
    other.backend_ = nullptr;
    other.tensor_ = Tensor();
  }
  return *this;
}

void Buffer::release() {
  if (backend_ && tensor_.data()) {
    backend_->do_free(tensor_.data());
    backend_->count_allocation(-static_cast<std::int64_t>(tensor_.bytes()));
  }
  backend_ = nullptr;
  tensor_ = Tensor();
}

}  // namespace tandem::kernels
