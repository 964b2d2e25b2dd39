/*
 * src/data/ingest/tokenizer_sp.cc: the C interface of tokenizer.h over
 * libsentencepiece (C++; Kudo & Richardson 2018, "SentencePiece: A simple and
 * language independent subword tokenizer and detokenizer for Neural Text
 * Processing"). The only C++ source of the library.
 *
 * Boundary rules: every function is extern "C" and noexcept in effect: each
 * body runs inside one try block; std::bad_alloc becomes AMPC_ERR_NOMEM, any
 * other exception AMPC_ERR_FORMAT with its what(). SentencePiece itself
 * reports through util::Status, whose message is kept in ours.
 *
 * Files are read and written here with stdio (not through SentencePiece's
 * file layer), so that a path with spaces or commas needs no quoting (the
 * trainer's "input" flag splits on commas) and the I/O errors name errno.
 * Training takes its sentences from an in-memory iterator and returns the
 * model as bytes (SentencePieceTrainer::Train's serialized_model_proto), so
 * no "<prefix>.model"/".vocab" pair is ever written.
 */
extern "C" {
#include "internal.h"
}

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h> /* fsync */

#include <exception>
#include <memory>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include "ampc/data.h" /* AMPC_TOKEN_PAD, AMPC_TOKEN_UNK */
#include "data/ingest/tokenizer.h"

struct ampc_tokenizer {
  sentencepiece::SentencePieceProcessor sp;
};

namespace {

/* ASCII A-Z -> a-z, every other byte unchanged (UTF-8 multi-byte sequences
 * have all bytes >= 0x80, so they are never touched). */
void lower_ascii(std::string &s) {
  for (char &c : s)
    if (c >= 'A' && c <= 'Z')
      c = static_cast<char>(c - 'A' + 'a');
}

/* Read a whole file into `out`. AMPC_ERR_IO with the errno text on failure. */
ampc_status read_file(const char *path, std::string &out) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return ampc_fail(AMPC_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  out.clear();
  char buf[1 << 16];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0)
    out.append(buf, n);
  const int err = ferror(f) ? errno : 0;
  fclose(f);
  if (err != 0)
    return ampc_fail(AMPC_ERR_IO, "%s: cannot read: %s", path, strerror(err));
  return AMPC_OK;
}

/* Write `bytes` to "<path>.tmp", flush it to disk and rename it to `path`
 * (a reader never sees a partial model). The temporary is removed on failure. */
ampc_status write_file_atomic(const char *path, const std::string &bytes) {
  const std::string tmp = std::string(path) + ".tmp";
  FILE *f = fopen(tmp.c_str(), "wb");
  if (!f)
    return ampc_fail(AMPC_ERR_IO, "%s: cannot create: %s", tmp.c_str(), strerror(errno));
  bool ok = fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
  int err = ok ? 0 : errno;
  if (fclose(f) != 0 && ok)
    ok = false, err = errno;
  if (!ok) {
    remove(tmp.c_str());
    return ampc_fail(AMPC_ERR_IO, "%s: cannot write: %s", tmp.c_str(), strerror(err));
  }
  if (rename(tmp.c_str(), path) != 0) {
    err = errno;
    remove(tmp.c_str());
    return ampc_fail(AMPC_ERR_IO, "%s: cannot rename %s to it: %s", path, tmp.c_str(),
                     strerror(err));
  }
  return AMPC_OK;
}

/* ---- checking a model's normalisation tables before SentencePiece uses them
 *
 * SentencePiece 0.1.97 trusts the precompiled_charsmap of a loaded model: its
 * Normalizer walks the Darts-clone double array in it and reads the
 * normalised strings with strlen, both without bounds checks, so a corrupt
 * (or truncated-and-padded) .model can make Encode read out of bounds. The
 * checks below make every read it can do stay inside the blob; they are
 * conservative and hold for every table SentencePiece's builder writes
 * (blocks of 256 units, unused units with offset 0, strings NUL-terminated). */

/* A protobuf varint at p (advanced); false past `end` or longer than 10 bytes. */
bool read_varint(const unsigned char *&p, const unsigned char *end, uint64_t &v) {
  v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (p >= end)
      return false;
    const unsigned char b = *p++;
    v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80))
      return true;
  }
  return false;
}

/* Calls f(field_number, data, size) for each length-delimited field of the
 * protobuf message [p, end) (protobuf's wire format: varint key = field << 3 |
 * wire type); false if the message is malformed or f returns false. */
template <class F> bool each_bytes_field(const unsigned char *p, const unsigned char *end, F f) {
  while (p < end) {
    uint64_t key = 0, v = 0;
    if (!read_varint(p, end, key))
      return false;
    switch (key & 7) {
    case 0:
      if (!read_varint(p, end, v))
        return false;
      break;
    case 1:
      if (end - p < 8)
        return false;
      p += 8;
      break;
    case 5:
      if (end - p < 4)
        return false;
      p += 4;
      break;
    case 2:
      if (!read_varint(p, end, v) || v > static_cast<uint64_t>(end - p))
        return false;
      if (!f(key >> 3, p, static_cast<size_t>(v)))
        return false;
      p += v;
      break;
    default: return false; /* groups (3, 4) are not used by ModelProto */
    }
  }
  return true;
}

/* A precompiled_charsmap: uint32 LE trie size T, T bytes of Darts-clone
 * units (uint32 LE each), then the NUL-terminated normalised strings. True
 * when every unit a lookup can pass through (unit 0 and the units whose
 * label has no MSB, i.e. can match a byte) has all its children and its leaf
 * inside the array, every leaf value is inside the strings and the strings
 * end with a NUL. */
bool charsmap_ok(const unsigned char *b, size_t n) {
  if (n == 0)
    return true; /* no table: SentencePiece normalises nothing */
  if (n < 4)
    return false;
  uint32_t tsize;
  memcpy(&tsize, b, 4);
  if (tsize % 4 != 0 || tsize > n - 4)
    return false;
  const size_t units = tsize / 4, nstr = n - 4 - tsize;
  const unsigned char *u = b + 4, *str = u + tsize;
  if (units < 256 || nstr == 0 || str[nstr - 1] != '\0')
    return false;
  auto unit = [u](size_t i) {
    uint32_t v;
    memcpy(&v, u + 4 * i, 4);
    return v;
  };
  for (size_t i = 0; i < units; i++) {
    const uint32_t x = unit(i);
    if (i != 0 && (x & (1u << 31)))
      continue; /* a leaf (value) unit: its label never matches a byte */
    const size_t off = static_cast<size_t>(x >> 10) << ((x & (1u << 9)) >> 6);
    const size_t base = i ^ off;
    if ((base | 0xff) >= units)
      return false;
    if (((x >> 8) & 1) && (unit(base) & 0x7fffffffu) >= nstr)
      return false;
  }
  return true;
}

/* True when the serialized ModelProto's normalizer_spec (field 3) and
 * denormalizer_spec (field 5) charsmaps (their field 2) pass charsmap_ok, in
 * every occurrence (protobuf merges repeated messages; the last bytes win). */
bool model_tables_ok(const std::string &model) {
  const auto *p = reinterpret_cast<const unsigned char *>(model.data());
  return each_bytes_field(p, p + model.size(), [](uint64_t f, const unsigned char *d, size_t n) {
    if (f != 3 && f != 5)
      return true;
    return each_bytes_field(d, d + n, [](uint64_t g, const unsigned char *e, size_t m) {
      return g != 2 || charsmap_ok(e, m);
    });
  });
}

/* The training sentences: the captions file's non-empty lines (LF or CRLF),
 * ASCII-lower-cased as ampc_tokenizer_encode will see them. */
class LineIterator : public sentencepiece::SentenceIterator {
public:
  explicit LineIterator(const std::vector<std::string> &lines) : lines_(lines) {}
  bool done() const override { return i_ >= lines_.size(); }
  void Next() override { ++i_; }
  const std::string &value() const override { return lines_[i_]; }
  sentencepiece::util::Status status() const override { return sentencepiece::util::Status(); }

private:
  const std::vector<std::string> &lines_;
  size_t i_ = 0;
};

ampc_status exception_status(const char *what_for) {
  try {
    throw;
  } catch (const std::bad_alloc &) {
    return ampc_fail(AMPC_ERR_NOMEM, "%s: out of memory", what_for);
  } catch (const std::exception &e) {
    return ampc_fail(AMPC_ERR_FORMAT, "%s: SentencePiece failed: %s", what_for, e.what());
  } catch (...) {
    return ampc_fail(AMPC_ERR_FORMAT, "%s: SentencePiece failed (unknown exception)", what_for);
  }
}

/* One SentencePiece training on `lines` with options `kw`; the serialized
 * model in `model`. AMPC_ERR_FORMAT with SentencePiece's message. */
ampc_status run_trainer(const char *captions_path,
                        const std::unordered_map<std::string, std::string> &kw,
                        const std::vector<std::string> &lines, std::string &model) {
  LineIterator it(lines);
  model.clear();
  const auto st = sentencepiece::SentencePieceTrainer::Train(kw, &it, &model);
  if (!st.ok())
    return ampc_fail(AMPC_ERR_FORMAT, "%s: SentencePiece could not train on it: %s", captions_path,
                     st.ToString().c_str());
  if (model.empty())
    return ampc_fail(AMPC_ERR_FORMAT, "%s: SentencePiece returned an empty model", captions_path);
  return AMPC_OK;
}

/* AMPC_ERR_FORMAT unless the serialized model has a piece besides <pad> and
 * <unk> (a corpus of white space and characters that NFKC drops has none). */
ampc_status check_pieces(const char *captions_path, const std::string &model) {
  sentencepiece::SentencePieceProcessor sp;
  const auto st = sp.LoadFromSerializedProto(model);
  if (!st.ok())
    return ampc_fail(AMPC_ERR_FORMAT, "%s: SentencePiece's model does not load: %s", captions_path,
                     st.ToString().c_str());
  for (int id = 0; id < sp.GetPieceSize(); id++)
    if (!sp.IsControl(id) && !sp.IsUnknown(id))
      return AMPC_OK;
  return ampc_fail(AMPC_ERR_FORMAT,
                   "%s: no characters to train a tokenizer on after SentencePiece's "
                   "normalisation (only white space or control characters?)",
                   captions_path);
}

ampc_status train(const char *captions_path, int32_t vocab, const char *type,
                  const char *model_path, int32_t pad_id, int32_t unk_id) {
  std::string text;
  AMPC_TRY(read_file(captions_path, text));
  std::vector<std::string> lines;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos)
      end = text.size();
    size_t stop = end;
    if (stop > pos && text[stop - 1] == '\r')
      stop--;
    if (stop > pos) {
      lines.emplace_back(text, pos, stop - pos);
      lower_ascii(lines.back());
    }
    pos = end + 1;
  }
  const size_t bytes = text.size();
  text.clear();
  text.shrink_to_fit();
  if (lines.empty())
    return ampc_fail(AMPC_ERR_FORMAT, "%s: no captions to train a tokenizer on (no non-empty line)",
                     captions_path);

  /* Options as a map, not a flag string: no quoting of values. The whole
   * input in file order (input_sentence_size=0, no shuffling) makes the model
   * a function of the input; minloglevel=2 keeps SentencePiece's INFO and
   * WARNING lines off stderr (its LOG writes to std::cerr); this setting is
   * SentencePiece's global and stays for the process. nmt_nfkc_cf is NFKC with Unicode case folding
   * plus SentencePiece's white-space handling: a model trained here folds
   * case itself, beyond the ASCII lower-casing done before it. */
  std::unordered_map<std::string, std::string> kw = {
      {"vocab_size", std::to_string(vocab)},
      {"model_type", "char"},
      {"character_coverage", "1.0"},
      {"pad_id", std::to_string(pad_id)},
      {"unk_id", std::to_string(unk_id)},
      {"bos_id", "-1"},
      {"eos_id", "-1"},
      {"hard_vocab_limit", "false"},
      {"input_sentence_size", "0"},
      {"shuffle_input_sentence", "false"},
      {"num_threads", "2"},
      {"normalization_rule_name", "nmt_nfkc_cf"},
      {"minloglevel", "2"},
  };
  /* the unigram trainer's suffix array indexes the corpus with int32 unless told */
  if (bytes > (size_t)1 << 30)
    kw["train_extremely_large_corpus"] = "true";
  std::string model;
  /* The unigram trainer ends the process (CHECK, exit) when no sentence is
   * left after normalisation (e.g. only white space or characters that NFKC
   * drops); the character trainer returns a model without pieces instead. So
   * a unigram model is trained only after a character model has shown that
   * there are characters to train on. */
  if (strcmp(type, "unigram") == 0) {
    AMPC_TRY(run_trainer(captions_path, kw, lines, model));
    AMPC_TRY(check_pieces(captions_path, model));
  }
  kw["model_type"] = type;
  AMPC_TRY(run_trainer(captions_path, kw, lines, model));
  AMPC_TRY(check_pieces(captions_path, model));
  return write_file_atomic(model_path, model);
}

} // namespace

extern "C" ampc_status ampc_tokenizer_train_ids(const char *captions_path, int32_t vocab,
                                                const char *type, const char *model_path,
                                                int32_t pad_id, int32_t unk_id) {
  if (!captions_path || !type || !model_path)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_tokenizer_train: NULL argument");
  if (vocab < 8 || vocab > 1000000)
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "%s: tokenizer vocabulary %d is out of range (8 to 1000000)", captions_path,
                     (int)vocab);
  if (strcmp(type, "bpe") != 0 && strcmp(type, "unigram") != 0)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "%s: unknown tokenizer type \"%s\" (bpe or unigram)",
                     captions_path, type);
  if (unk_id < 0 || unk_id >= vocab || pad_id < -1 || pad_id >= vocab || pad_id == unk_id)
    return ampc_fail(AMPC_ERR_INVALID_ARG,
                     "%s: tokenizer ids pad=%d unk=%d are not allowed with vocabulary %d",
                     captions_path, (int)pad_id, (int)unk_id, (int)vocab);
  try {
    return train(captions_path, vocab, type, model_path, pad_id, unk_id);
  } catch (...) {
    return exception_status(captions_path);
  }
}

extern "C" ampc_status ampc_tokenizer_train(const char *captions_path, int32_t vocab,
                                            const char *type, const char *model_path) {
  return ampc_tokenizer_train_ids(captions_path, vocab, type, model_path, AMPC_TOKEN_PAD,
                                  AMPC_TOKEN_UNK);
}

extern "C" ampc_status ampc_tokenizer_load(ampc_tokenizer **out, const char *model_path) {
  if (!out || !model_path)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_tokenizer_load: NULL argument");
  *out = nullptr;
  try {
    std::string bytes;
    AMPC_TRY(read_file(model_path, bytes));
    if (bytes.empty())
      return ampc_fail(AMPC_ERR_FORMAT, "%s: empty file, not a SentencePiece model", model_path);
    if (!model_tables_ok(bytes))
      return ampc_fail(AMPC_ERR_FORMAT,
                       "%s: not a SentencePiece model, or its normalisation table is broken "
                       "(an index out of range)",
                       model_path);
    std::unique_ptr<ampc_tokenizer> t(new ampc_tokenizer);
    const auto st = t->sp.LoadFromSerializedProto(bytes);
    if (!st.ok())
      return ampc_fail(AMPC_ERR_FORMAT, "%s: not a SentencePiece model: %s", model_path,
                       st.ToString().c_str());
    const int n = t->sp.GetPieceSize(), pad = t->sp.pad_id(), unk = t->sp.unk_id();
    if (pad != AMPC_TOKEN_PAD || unk != AMPC_TOKEN_UNK) {
      const bool pad_bad = pad != AMPC_TOKEN_PAD;
      return ampc_fail(AMPC_ERR_FORMAT,
                       "%s: %s id is %d, ampc needs <pad>=0 and <unk>=1 (train with --pad_id=0 "
                       "--unk_id=1)",
                       model_path, pad_bad ? "pad" : "unk", pad_bad ? pad : unk);
    }
    if (n < 2)
      return ampc_fail(AMPC_ERR_FORMAT, "%s: SentencePiece model with %d pieces", model_path, n);
    *out = t.release();
    return AMPC_OK;
  } catch (...) {
    return exception_status(model_path);
  }
}

extern "C" void ampc_tokenizer_free(ampc_tokenizer *t) { delete t; }

extern "C" int32_t ampc_tokenizer_vocab(const ampc_tokenizer *t) {
  return t ? static_cast<int32_t>(t->sp.GetPieceSize()) : 0;
}

extern "C" const char *ampc_tokenizer_piece(const ampc_tokenizer *t, int32_t id) {
  if (!t || id < 0 || id >= t->sp.GetPieceSize())
    return nullptr;
  /* a reference into the loaded model: valid as long as t */
  return t->sp.IdToPiece(id).c_str();
}

extern "C" ampc_status ampc_tokenizer_encode(const ampc_tokenizer *t, const char *text,
                                             int32_t *out, int32_t seq_len, int32_t *n_full) {
  if (!t || !text || !out || seq_len < 1)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_tokenizer_encode: bad arguments (seq_len %d)",
                     (int)seq_len);
  try {
    std::string s(text);
    lower_ascii(s);
    std::vector<int> ids;
    const auto st = t->sp.Encode(s, &ids);
    if (!st.ok())
      return ampc_fail(AMPC_ERR_FORMAT, "tokenizer: SentencePiece could not encode \"%.40s\": %s",
                       text, st.ToString().c_str());
    const size_t n = ids.size(), keep = n < (size_t)seq_len ? n : (size_t)seq_len;
    for (size_t i = 0; i < keep; i++)
      out[i] = ids[i];
    for (size_t i = keep; i < (size_t)seq_len; i++)
      out[i] = AMPC_TOKEN_PAD;
    if (n_full)
      *n_full = n > (size_t)INT32_MAX ? INT32_MAX : static_cast<int32_t>(n);
    return AMPC_OK;
  } catch (...) {
    return exception_status("tokenizer");
  }
}

extern "C" ampc_status ampc_tokenizer_decode(const ampc_tokenizer *t, const int32_t *ids, int32_t n,
                                             char *out, size_t out_size) {
  if (!t || (!ids && n > 0) || n < 0 || !out || out_size < 1)
    return ampc_fail(AMPC_ERR_INVALID_ARG, "ampc_tokenizer_decode: bad arguments");
  out[0] = '\0';
  try {
    const int vocab = t->sp.GetPieceSize();
    std::vector<int> v;
    v.reserve((size_t)n);
    for (int32_t i = 0; i < n; i++) {
      if (ids[i] < 0 || ids[i] >= vocab)
        return ampc_fail(AMPC_ERR_INVALID_ARG, "tokenizer: id %d at position %d is not in [0, %d)",
                         (int)ids[i], (int)i, vocab);
      if (ids[i] != AMPC_TOKEN_PAD)
        v.push_back(ids[i]);
    }
    std::string s;
    const auto st = t->sp.Decode(v, &s);
    if (!st.ok())
      return ampc_fail(AMPC_ERR_FORMAT, "tokenizer: SentencePiece could not decode: %s",
                       st.ToString().c_str());
    if (s.size() >= out_size)
      return ampc_fail(AMPC_ERR_INVALID_ARG,
                       "tokenizer: the decoded text needs %zu bytes, the buffer has %zu",
                       s.size() + 1, out_size);
    memcpy(out, s.c_str(), s.size() + 1);
    return AMPC_OK;
  } catch (...) {
    return exception_status("tokenizer");
  }
}
