// verifylib's Core ML seam: whisper.cpp's three Core ML functions, served by an executor.
//
// whisper.cpp reaches Apple's Core ML through three C functions only (src/coreml/
// whisper-encoder.h). Linked in place of Apple's whisper-encoder.mm, this file lets a
// Linux build compiled with WHISPER_USE_COREML run every line of whisper.cpp's Core ML
// path: the derived .mlmodelc path, init's load and failure branches, the fail-closed
// return, the mel handed over as [1, n_mel, n_ctx], the output copied into the decoder's
// cross-attention. The program itself is executed by verifylib's ML-program executor,
// reached over a Unix socket named by the environment (docs/runtime-contract.md §11).
//
// It is informational and says so: every line it prints starts with VLS_PREFIX, and it
// never pretends to be Apple's runtime. Where Apple's implementation drops errors
// (error:nil), init refuses loudly and a lost executor ends the process with
// VLS_EXIT_EXECUTOR_LOST: a transcript is never made from an encoder output nobody wrote.
//
// SHA-256 is written out here (FIPS 180-4) because the static whisper-cli links no crypto
// library; the executor hashes the same bytes, and the rules compare both.

#include "coreml/whisper-encoder.h"
#include "verifylib_seam_contract.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <string>
#include <vector>

struct whisper_coreml_context {
    int fd;
    long calls;
    unsigned long long max_floats;  // 0: not told (then only the reply's own count decides)
};

namespace {

// ------------------------------------------------------------------------------ SHA-256

struct Sha256 {
    uint32_t h[8];
    uint64_t len;
    unsigned char buf[64];
    size_t used;
};

const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
    0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
    0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
    0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
    0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
    0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
    0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
    0xc67178f2};

inline uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

void sha_block(Sha256 & s, const unsigned char * p) {
    uint32_t w[64];
    for (int i = 0; i < 16; i++) {
        w[i] = (uint32_t) p[4 * i] << 24 | (uint32_t) p[4 * i + 1] << 16 |
               (uint32_t) p[4 * i + 2] << 8 | (uint32_t) p[4 * i + 3];
    }
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = s.h[0], b = s.h[1], c = s.h[2], d = s.h[3];
    uint32_t e = s.h[4], f = s.h[5], g = s.h[6], h = s.h[7];
    for (int i = 0; i < 64; i++) {
        uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + K[i] + w[i];
        uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        h = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
    }
    s.h[0] += a; s.h[1] += b; s.h[2] += c; s.h[3] += d;
    s.h[4] += e; s.h[5] += f; s.h[6] += g; s.h[7] += h;
}

std::string sha256_hex(const void * data, size_t n) {
    Sha256 s = {{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c,
                 0x1f83d9ab, 0x5be0cd19}, 0, {0}, 0};
    const unsigned char * p = (const unsigned char *) data;
    s.len = n;
    while (n >= 64) { sha_block(s, p); p += 64; n -= 64; }
    unsigned char tail[128] = {0};
    memcpy(tail, p, n);
    tail[n] = 0x80;
    size_t total = n + 1 + 8 <= 64 ? 64 : 128;
    uint64_t bits = s.len * 8;
    for (int i = 0; i < 8; i++) tail[total - 1 - i] = (unsigned char) (bits >> (8 * i));
    sha_block(s, tail);
    if (total == 128) sha_block(s, tail + 64);
    char hex[65];
    for (int i = 0; i < 8; i++) snprintf(hex + 8 * i, 9, "%08x", s.h[i]);
    return std::string(hex, 64);
}

// ------------------------------------------------------------------------------ the wire

bool send_all(int fd, const void * data, size_t n) {
    const char * p = (const char *) data;
    while (n > 0) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return false;
        p += k; n -= (size_t) k;
    }
    return true;
}

bool recv_all(int fd, void * data, size_t n) {
    char * p = (char *) data;
    while (n > 0) {
        ssize_t k = recv(fd, p, n, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return false;
        p += k; n -= (size_t) k;
    }
    return true;
}

bool send_request(int fd, const char * op, const std::vector<std::vector<char>> & parts) {
    uint64_t len = 0;
    for (const auto & part : parts) len += part.size();
    if (!send_all(fd, op, 4) || !send_all(fd, &len, sizeof len)) return false;
    for (const auto & part : parts) {
        if (!part.empty() && !send_all(fd, part.data(), part.size())) return false;
    }
    return true;
}

// Reads a reply's status and length; the payload is left for the caller.
bool recv_head(int fd, uint32_t * status, uint64_t * len) {
    return recv_all(fd, status, sizeof *status) && recv_all(fd, len, sizeof *len);
}

bool recv_text(int fd, uint64_t len, std::string * out) {
    if (len > VLS_MAX_MESSAGE_BYTES) return false;
    out->assign((size_t) len, '\0');
    return len == 0 || recv_all(fd, &(*out)[0], (size_t) len);
}

std::vector<char> bytes_of(const std::string & s) {
    uint32_t n = (uint32_t) s.size();
    std::vector<char> v(sizeof n + s.size());
    memcpy(v.data(), &n, sizeof n);
    memcpy(v.data() + sizeof n, s.data(), s.size());
    return v;
}

void say(const char * marker, const std::string & rest) {
    fprintf(stderr, "%s%s\n", marker, rest.c_str());
    fflush(stderr);
}

[[noreturn]] void executor_lost(long call, const std::string & what) {
    int err = errno;
    std::string why = what + " during encode #" + std::to_string(call);
    if (err != 0) why += std::string(" (") + strerror(err) + ")";
    say(VLS_EXECUTOR_LOST, why);
    _exit(VLS_EXIT_EXECUTOR_LOST);
}

int connect_executor(std::string * why) {
    const char * path = getenv(VLS_SOCKET_ENV);
    if (path == nullptr || *path == '\0') {
        *why = std::string("no executor: ") + VLS_SOCKET_ENV + " is not set";
        return -1;
    }
    sockaddr_un addr;
    memset(&addr, 0, sizeof addr);
    addr.sun_family = AF_UNIX;
    if (strlen(path) >= sizeof addr.sun_path) {
        *why = std::string("executor socket path too long: ") + path;
        return -1;
    }
    strcpy(addr.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0) {
        *why = std::string("socket(): ") + strerror(errno);
        return -1;
    }
    timeval tv = {VLS_IO_TIMEOUT_S, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (connect(fd, (sockaddr *) &addr, sizeof addr) != 0) {
        *why = std::string("no executor at ") + path + ": " + strerror(errno);
        close(fd);
        return -1;
    }
    return fd;
}

}  // namespace

extern "C" {

struct whisper_coreml_context * whisper_coreml_init(const char * path_model) {
    say(VLS_BANNER, "");
    struct stat st;
    // Core ML's load fails on a missing folder before anything else: so does the seam.
    if (path_model == nullptr || stat(path_model, &st) != 0 || !S_ISDIR(st.st_mode)) {
        say(VLS_REFUSED, std::string("no folder at '") + (path_model ? path_model : "") + "'");
        return nullptr;
    }
    std::string why;
    int fd = connect_executor(&why);
    if (fd < 0) {
        say(VLS_REFUSED, why);
        return nullptr;
    }
    const char * token = getenv(VLS_LAUNCH_ENV);
    std::string tok = token ? token : "";
    const char * cap = getenv(VLS_OUTPUT_FLOATS_ENV);
    unsigned long long max_floats = cap ? strtoull(cap, nullptr, 10) : 0;
    std::vector<char> cap_bytes(sizeof max_floats);
    memcpy(cap_bytes.data(), &max_floats, sizeof max_floats);
    if (!send_request(fd, VLS_OP_LOAD, {bytes_of(tok), bytes_of(path_model), cap_bytes})) {
        say(VLS_REFUSED, std::string("executor closed before the load: ") + strerror(errno));
        close(fd);
        return nullptr;
    }
    uint32_t status = 1;
    uint64_t len = 0;
    std::string msg;
    if (!recv_head(fd, &status, &len) || !recv_text(fd, len, &msg)) {
        say(VLS_REFUSED, "executor gave no answer to the load");
        close(fd);
        return nullptr;
    }
    if (status != VLS_STATUS_OK) {
        say(VLS_REFUSED, msg);
        close(fd);
        return nullptr;
    }
    say(VLS_LOADED, msg);
    auto * ctx = new whisper_coreml_context;
    ctx->fd = fd;
    ctx->calls = 0;
    ctx->max_floats = max_floats;
    return ctx;
}

void whisper_coreml_free(struct whisper_coreml_context * ctx) {
    if (ctx == nullptr) return;
    // Waits for the executor's acknowledgement, so its record is complete when we exit.
    uint32_t status = 1;
    uint64_t len = 0;
    if (send_request(ctx->fd, VLS_OP_FREE, {})) recv_head(ctx->fd, &status, &len);
    close(ctx->fd);
    say(VLS_FREED, std::to_string(ctx->calls) + " encode call(s)");
    delete ctx;
}

void whisper_coreml_encode(const whisper_coreml_context * ctx, int64_t n_ctx, int64_t n_mel,
                           float * mel, float * out) {
    // whisper.cpp holds the context as const; the call counter is the seam's own record.
    auto * c = const_cast<whisper_coreml_context *>(ctx);
    long call = ++c->calls;
    errno = 0;
    size_t n_in = (size_t) n_ctx * (size_t) n_mel;
    std::vector<char> head(2 * sizeof(int64_t));
    memcpy(head.data(), &n_ctx, sizeof n_ctx);
    memcpy(head.data() + sizeof n_ctx, &n_mel, sizeof n_mel);
    std::vector<char> data((const char *) mel, (const char *) mel + n_in * sizeof(float));
    std::string in_sha = sha256_hex(mel, n_in * sizeof(float));
    if (!send_request(c->fd, VLS_OP_ENCODE, {head, data})) executor_lost(call, "send failed");
    uint32_t status = 1;
    uint64_t len = 0;
    if (!recv_head(c->fd, &status, &len)) {
        executor_lost(call, errno ? "no reply" : "connection closed");
    }
    if (status != VLS_STATUS_OK) {
        std::string msg;
        if (!recv_text(c->fd, len, &msg)) executor_lost(call, "unreadable refusal");
        errno = 0;
        executor_lost(call, "refused: " + msg);
    }
    if (len % sizeof(float) != 0) executor_lost(call, "reply is not whole float32 values");
    size_t count = (size_t) (len / sizeof(float));
    // As Apple's implementation does, the output's own element count decides the copy
    // (src/coreml/whisper-encoder.mm: memcpy of output.count floats). Unlike it, a reply
    // larger than whisper.cpp's encoder buffer (its size handed over by the stage, which
    // read the model's n_audio_ctx * n_audio_state) is refused before a byte is copied.
    if (c->max_floats != 0 && count > c->max_floats) {
        errno = 0;
        executor_lost(call, "reply of " + std::to_string(count) + " floats is larger than "
                      "whisper.cpp's encoder output of " + std::to_string(c->max_floats));
    }
    if (!recv_all(c->fd, out, count * sizeof(float))) executor_lost(call, "short reply");
    std::string out_sha = sha256_hex(out, count * sizeof(float));
    char line[512];
    snprintf(line, sizeof line, "#%ld n_ctx=%lld n_mel=%lld count=%zu input_sha256=%s "
             "output_sha256=%s", call, (long long) n_ctx, (long long) n_mel, count,
             in_sha.c_str(), out_sha.c_str());
    say(VLS_ENCODE, line);
}

}  // extern "C"
