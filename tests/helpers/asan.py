"""Sanitizer output as measured, shared by tests/unit and tests/fake test_sanitizer.py."""

# What the v1.8.5 unpatched ASan whisper-cli printed under the lifecycle trigger on our
# Linux machine (GCC 12 libasan, llvm-symbolizer on PATH), addresses as measured.
MEASURED = b"""\
whisper_init_state: kv pad  size  =    2.36 MB
aheads_masks_init: tried to set alignment head on text layer 8, but model only has 4 text layerswhisper_init_state: aheads_masks_init() failed for alignment heads masks
AddressSanitizer:DEADLYSIGNAL
=================================================================
==1502==ERROR: AddressSanitizer: BUS on unknown address (pc 0x7fb44bc288b5 bp 0xbebebebebebebeae sp 0x7ffca15e0a10 T0)
==1502==The signal is caused by a READ memory access.
==1502==Hint: this fault was caused by a dereference of a high value address (see register values below).  Disassemble the provided pc to learn which register was used.
    #0 0x7fb44bc288b5 in bool __sanitizer::atomic_compare_exchange_strong<__sanitizer::atomic_uint8_t>(__sanitizer::atomic_uint8_t volatile*, __sanitizer::atomic_uint8_t::Type*, __sanitizer::atomic_uint8_t::Type, __sanitizer::memory_order) ../../../../src/libsanitizer/sanitizer_common/sanitizer_atomic_clang.h:80
    #1 0x7fb44bc288b5 in __asan::Allocator::AtomicallySetQuarantineFlagIfAllocated(__asan::AsanChunk*, void*, __sanitizer::BufferedStackTrace*) ../../../../src/libsanitizer/asan/asan_allocator.cpp:620
    #2 0x7fb44bc288b5 in __asan::Allocator::Deallocate(void*, unsigned long, unsigned long, __sanitizer::BufferedStackTrace*, __asan::AllocType) ../../../../src/libsanitizer/asan/asan_allocator.cpp:696
    #3 0x7fb44bc288b5 in __asan::asan_free(void*, __sanitizer::BufferedStackTrace*, __asan::AllocType) ../../../../src/libsanitizer/asan/asan_allocator.cpp:955
    #4 0x7fb44bcb767e in __interceptor_free ../../../../src/libsanitizer/asan/asan_malloc_linux.cpp:53
    #5 0x55df7dbddcd5 in whisper_batch_free /whisper.cpp/src/whisper.cpp:499
    #6 0x55df7dbddcd5 in whisper_free_state /whisper.cpp/src/whisper.cpp:3824
    #7 0x55df7dbe5c4d in whisper_init_state /whisper.cpp/src/whisper.cpp:3433
    #8 0x55df7dc12d74 in whisper_init_from_file_with_params /whisper.cpp/src/whisper.cpp:3741
    #9 0x55df7da3896a in main /whisper.cpp/examples/cli/cli.cpp:1101
    #10 0x7fb44ba45249 in __libc_start_call_main ../sysdeps/nptl/libc_start_call_main.h:58
    #11 0x7fb44ba45304 in __libc_start_main_impl ../csu/libc-start.c:360
    #12 0x55df7da1e180 in _start (/cache/builds/c45c52ee/whisper-cli+0x4a180)

AddressSanitizer can not provide additional info.
SUMMARY: AddressSanitizer: BUS ../../../../src/libsanitizer/sanitizer_common/sanitizer_atomic_clang.h:80 in bool __sanitizer::atomic_compare_exchange_strong<__sanitizer::atomic_uint8_t>(__sanitizer::atomic_uint8_t volatile*, __sanitizer::atomic_uint8_t::Type*, __sanitizer::atomic_uint8_t::Type, __sanitizer::memory_order)
==1502==ABORTING
"""
"""The stderr of that run, AddressSanitizer report included (bytes)."""
