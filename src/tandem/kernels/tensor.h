// Tensors of the backend interface: a dtype, a shape and a pointer into a backend's memory.
// `Tensor` is a view (it never owns memory); `Buffer` owns one allocation of a backend and hands
// out views of it. Model, optimiser and trainer code pass Tensors to Backend ops and never
// dereference their pointers: on the CPU backend they are host memory, on CUDA device memory.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace tandem::kernels {

enum class DType : std::uint8_t { f32, bf16, i64 };

std::size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);

template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::f32;
}
template <>
constexpr DType dtype_of<std::int64_t>() {
  return DType::i64;
}
// bf16 values are stored as their 16 raw bits.
template <>
constexpr DType dtype_of<std::uint16_t>() {
  return DType::bf16;
}

// Up to four dimensions, row-major and contiguous.
class Shape {
 public:
  static constexpr int kMaxRank = 4;
  Shape() = default;
  Shape(std::initializer_list<std::int64_t> dims);
  int rank() const { return rank_; }
  std::int64_t operator[](int i) const { return dims_[static_cast<std::size_t>(i)]; }
  std::int64_t numel() const;
  bool operator==(const Shape& other) const;
  std::string str() const;                 // "[2, 16, 64]"
  std::vector<std::int64_t> dims() const;  // the `rank()` dimensions (checkpoint metadata)

 private:
  std::array<std::int64_t, kMaxRank> dims_{};
  int rank_ = 0;
};

class Tensor {
 public:
  Tensor() = default;
  Tensor(void* data, DType dtype, Shape shape) : data_(data), dtype_(dtype), shape_(shape) {}

  void* data() const { return data_; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int rank() const { return shape_.rank(); }
  std::int64_t dim(int i) const { return shape_[i]; }
  std::int64_t numel() const { return shape_.numel(); }
  std::size_t bytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype_); }
  bool defined() const { return data_ != nullptr || numel() == 0; }
  explicit operator bool() const { return data_ != nullptr; }

  // Typed pointer; throws if T is not the tensor's dtype. For backend implementations.
  template <typename T>
  T* ptr() const {
    check_dtype(dtype_of<T>());
    return static_cast<T*>(data_);
  }

  // The same memory with another shape of the same element count.
  Tensor reshape(Shape shape) const;
  // `shape` elements starting `offset` elements into this tensor's memory (contiguous sub-view).
  Tensor view(std::int64_t offset, Shape shape) const;
  // Rows [begin, end) of the first dimension.
  Tensor rows(std::int64_t begin, std::int64_t end) const;
  // Describes the tensor for error messages: "f32[2, 16, 64]".
  std::string str() const;

 private:
  void check_dtype(DType expected) const;
  void* data_ = nullptr;
  DType dtype_ = DType::f32;
  Shape shape_;
};

// A tensor's elements, or null for an absent (optional) tensor: for backend implementations.
inline float* f32_or_null(const Tensor& t) { return t ? t.ptr<float>() : nullptr; }
inline const std::int64_t* i64_or_null(const Tensor& t) {
  return t ? t.ptr<std::int64_t>() : nullptr;
}

class Backend;

// One allocation of a backend's memory, freed when the Buffer goes away.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Backend* backend, DType dtype, Shape shape);
  ~Buffer();
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  const Tensor& tensor() const { return tensor_; }
  operator const Tensor&() const { return tensor_; }  // NOLINT: a Buffer is usable as its view
  std::int64_t numel() const { return tensor_.numel(); }
  std::size_t bytes() const { return tensor_.bytes(); }
  const Shape& shape() const { return tensor_.shape(); }

 private:
  void release();
  Backend* backend_ = nullptr;
  Tensor tensor_;
};

}  // namespace tandem::kernels
