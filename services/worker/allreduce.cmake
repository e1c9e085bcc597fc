# Included from services/worker/CMakeLists.txt.
# strata_ring_allreduce: the ring all-reduce on float buffers, its RingLink seam and the gRPC
# link and the plain-TCP link, no LibTorch (its tests and the benchmark start fast). strata_ring_in_memory: the in-memory
# link for tests. strata_allreduce: the ring plus the all-reduce synchroniser (and its buckets
# reduced during backward), which sees the trainer only through the torch-free trainer.h
# (strata_torch links the implementation).
add_library(strata_ring_allreduce STATIC
  ${CMAKE_CURRENT_LIST_DIR}/ring_allreduce.cc
  ${CMAKE_CURRENT_LIST_DIR}/grpc_ring_link.cc
  ${CMAKE_CURRENT_LIST_DIR}/tcp_frame.cc
  ${CMAKE_CURRENT_LIST_DIR}/tcp_ring_link.cc
  ${CMAKE_CURRENT_LIST_DIR}/segment_codec.cc)
target_link_libraries(strata_ring_allreduce PUBLIC strata_common)

add_library(strata_ring_in_memory STATIC ${CMAKE_CURRENT_LIST_DIR}/in_memory_ring_link.cc)
target_link_libraries(strata_ring_in_memory PUBLIC strata_ring_allreduce)

add_library(strata_allreduce STATIC ${CMAKE_CURRENT_LIST_DIR}/allreduce_sync.cc
  ${CMAKE_CURRENT_LIST_DIR}/bucket_reduction.cc)
target_link_libraries(strata_allreduce PUBLIC strata_ring_allreduce strata_torch)
