/*
 * tools/ampc/cmd_pack.c: `ampc data pack`: a user's captioned images (CSV/TSV,
 * JSON Lines, WebDataset tar shards, an image folder with metadata) to a
 * packed dataset that `ampc train --data DIR` streams (include/ampc/shards.h,
 * src/data/ingest/pack.c). Flags only; the work is ampc_pack.
 */
#define _POSIX_C_SOURCE 200809L
#include "internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ampc/shards.h"
#include "cli.h"

const char ampc_pack_usage[] =
    "Usage: ampc data pack INPUT --out DIR [options]\n"
    "\n"
    "Pack captioned images into a folder `ampc train --data DIR` streams: square\n"
    "images (shorter side resized with an area filter, centre crop, sRGB), captions\n"
    "as SentencePiece tokens, a train/val split by a seeded hash of each image's\n"
    "key, shards of fixed-size records with their SHA-256 in manifest.json.\n"
    "INPUT is one of:\n"
    "  data.csv | data.tsv    a header row; image path and caption columns (paths\n"
    "                         relative to the file; RFC 4180 quoting)\n"
    "  data.jsonl             one object per line: \"image\", \"caption\" (or \"text\")\n"
    "  DIR                    an image folder with metadata.jsonl or metadata.csv\n"
    "                         (\"file_name\", \"caption\"/\"text\": Hugging Face imagefolder)\n"
    "  a.tar | 'a-{000..099}.tar' | a.tar,b.tar\n"
    "                         WebDataset shards: KEY.jpg|png|webp with KEY.txt\n"
    "Bad samples (missing, empty, corrupt or truncated images, decompression bombs,\n"
    "captions that are empty or not UTF-8, truncated tars) are skipped and counted\n"
    "by reason; --strict stops at the first with its file and reason. A killed\n"
    "pack run again with the same flags continues; a finished one is never\n"
    "overwritten.\n"
    "\n"
    "Options:\n"
    "  --out DIR             the packed dataset's folder (required)\n"
    "  --image-key K         image column/key (CSV: filepath, JSONL: image,\n"
    "                        folder: file_name)\n"
    "  --caption-key K       caption column/key (CSV: title, JSONL: caption or text)\n"
    "  --label-key K         class column/key (WebDataset: a member extension, e.g.\n"
    "                        cls): zero-shot accuracy at evaluation\n"
    "  --prompt TEXT         zero-shot prompt (\"a photo of a {label}\")\n"
    "  --image-size N        side of the packed images (64; 32, 96, 128, 224, ...)\n"
    "  --seq-len N           tokens per caption (32); longer captions are cut and\n"
    "                        counted\n"
    "  --vocab N             SentencePiece pieces to train on the training captions\n"
    "                        (4000; a small corpus may give fewer)\n"
    "  --tokenizer FILE      use this SentencePiece .model (pad id 0, unk id 1)\n"
    "  --tokenizer-type T    bpe (default) or unigram\n"
    "  --val-fraction F      share of samples held out as val (0.05)\n"
    "  --seed N              seed of the split hash (0)\n"
    "  --shard-samples N     source samples per shard (4096)\n"
    "  --max-pixels N        refuse images with more pixels (67108864)\n"
    "  --threads N           decoding threads (all cores)\n"
    "  --strict              stop at the first bad sample\n"
    "  --json                the report as one JSON line\n";

typedef struct progress_state {
  bool tty;
  double t0, last;
} progress_state;

static void on_progress(void *user, int64_t done, int64_t total, int64_t skipped) {
  progress_state *p = user;
  const double now = ampc_now_s();
  if (done < total && now - p->last < (p->tty ? 0.2 : 5.0))
    return;
  p->last = now;
  const double rate = now > p->t0 ? (double)done / (now - p->t0) : 0.0;
  const double frac = total > 0 ? (double)done / (double)total : 0.0;
  if (p->tty) {
    char bar[31];
    const int w = (int)(frac * 30.0);
    for (int k = 0; k < 30; k++)
      bar[k] = k < w ? '#' : '.';
    bar[30] = 0;
    fprintf(stderr, "\rpack [%s] %lld/%lld  %.0f samples/s  skipped %lld ", bar, (long long)done,
            (long long)total, rate, (long long)skipped);
  } else {
    fprintf(stderr, "pack: %lld/%lld samples (%.1f%%), %.0f samples/s, skipped %lld\n",
            (long long)done, (long long)total, 100.0 * frac, rate, (long long)skipped);
  }
}

static bool is_flag(const char *n) { return !strcmp(n, "strict") || !strcmp(n, "json"); }

static int parse_num(const char *name, const char *v, double lo, double hi, double *out) {
  char *end = NULL;
  errno = 0;
  const double x = strtod(v, &end);
  const bool whole = strcmp(name, "val-fraction") != 0;
  if (!*v || *end || errno || !(x >= lo && x <= hi) || (whole && x != (double)(int64_t)x))
    return whole ? cli_usage_error("data", "--%s: bad value '%s' (a whole number, %.0f to %.0f)",
                                   name, v, lo, hi)
                 : cli_usage_error("data", "--%s: bad value '%s' (%g to %g)", name, v, lo, hi);
  *out = x;
  return 0;
}

int cmd_data_pack(int argc, char **argv) {
  ampc_pack_options o;
  memset(&o, 0, sizeof o);
  o.val_fraction = 0.05;
  bool json = false;
  for (int i = 2; i < argc; i++)
    if (cli_is_help(argv[i])) {
      fputs(ampc_pack_usage, stdout);
      return 0;
    }
  for (int i = 2; i < argc; i++) {
    if (argv[i][0] != '-' || !argv[i][1]) {
      if (o.input)
        return cli_usage_error("data",
                               "pack: one INPUT (got '%s' and '%s'; several tars are "
                               "given as a,b or a brace pattern)",
                               o.input, argv[i]);
      o.input = argv[i];
      continue;
    }
    char name[32];
    const char *v = NULL;
    const int orc = cli_next_option("data", argc, argv, &i, is_flag, name, sizeof name, &v);
    if (orc)
      return orc;
    double x = 0;
    if (!strcmp(name, "strict"))
      o.strict = true;
    else if (!strcmp(name, "json"))
      json = true;
    else if (!strcmp(name, "out"))
      o.out_dir = v;
    else if (!strcmp(name, "image-key"))
      o.image_key = v;
    else if (!strcmp(name, "caption-key"))
      o.caption_key = v;
    else if (!strcmp(name, "label-key"))
      o.label_key = v;
    else if (!strcmp(name, "prompt"))
      o.prompt = v;
    else if (!strcmp(name, "tokenizer"))
      o.tokenizer = v;
    else if (!strcmp(name, "tokenizer-type"))
      o.tokenizer_type = v;
    else if (!strcmp(name, "image-size")) {
      if (parse_num(name, v, 8, 1024, &x))
        return AMPC_EXIT_USAGE;
      o.image_size = (int32_t)x;
    } else if (!strcmp(name, "seq-len")) {
      if (parse_num(name, v, 1, 1024, &x))
        return AMPC_EXIT_USAGE;
      o.seq_len = (int32_t)x;
    } else if (!strcmp(name, "vocab")) {
      if (parse_num(name, v, 8, 1000000, &x))
        return AMPC_EXIT_USAGE;
      o.vocab = (int32_t)x;
    } else if (!strcmp(name, "val-fraction")) {
      if (parse_num(name, v, 0, 0.99, &x))
        return AMPC_EXIT_USAGE;
      o.val_fraction = x;
    } else if (!strcmp(name, "seed")) {
      if (parse_num(name, v, 0, 9007199254740992.0, &x))
        return AMPC_EXIT_USAGE;
      o.seed = (uint64_t)x;
    } else if (!strcmp(name, "shard-samples")) {
      if (parse_num(name, v, 1, 16777216, &x))
        return AMPC_EXIT_USAGE;
      o.shard_samples = (int32_t)x;
    } else if (!strcmp(name, "max-pixels")) {
      if (parse_num(name, v, 1, 1e12, &x))
        return AMPC_EXIT_USAGE;
      o.max_pixels = (int64_t)x;
    } else if (!strcmp(name, "threads")) {
      if (parse_num(name, v, 1, 256, &x))
        return AMPC_EXIT_USAGE;
      o.threads = (int)x;
    } else
      return cli_usage_error("data", "pack: unknown option --%s", name);
  }
  if (!o.input || !o.out_dir)
    return cli_usage_error("data", "pack needs INPUT and --out DIR");
  progress_state ps = {.tty = isatty(fileno(stderr)) != 0, .t0 = ampc_now_s()};
  o.progress = on_progress, o.user = &ps;
  ampc_pack_report rep;
  const ampc_status st = ampc_pack(&o, &rep);
  if (ps.tty)
    fputc('\n', stderr);
  if (st != AMPC_OK)
    return cli_runtime_error("data", "pack: %s", ampc_last_error());
  /* most samples bad: packed, but say so where it is seen (exit 0: --strict stops) */
  if (rep.read > 0 && 2 * rep.skipped > rep.read)
    fprintf(stderr,
            "ampc data: warning: %lld of %lld samples were skipped (the report lists why; a "
            "WebDataset tar needs each key's members next to each other, as `tar --sort=name` "
            "or webdataset's writers put them)\n",
            (long long)rep.skipped, (long long)rep.read);
  if (json) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "event", "pack");
    cJSON_AddStringToObject(j, "out", o.out_dir);
    const struct {
      const char *k;
      double v;
    } f[] = {{"read", (double)rep.read},
             {"train", (double)rep.n_train},
             {"val", (double)rep.n_val},
             {"skipped", (double)rep.skipped},
             {"truncated_captions", (double)rep.truncated_captions},
             {"shards", (double)rep.shards},
             {"resumed_shards", (double)rep.resumed_shards},
             {"vocab", rep.vocab},
             {"classes", rep.n_classes},
             {"seconds", rep.seconds},
             {"decode_seconds", rep.decode_seconds}};
    for (size_t k = 0; k < sizeof f / sizeof f[0]; k++)
      cJSON_AddNumberToObject(j, f[k].k, f[k].v);
    cJSON *sk = cJSON_AddObjectToObject(j, "skipped_by");
    for (int r = 0; r < ampc_pack_skip_reasons(); r++)
      if (rep.skipped_by[r])
        cJSON_AddNumberToObject(sk, ampc_pack_skip_reason(r), (double)rep.skipped_by[r]);
    return cli_print_json("data", j);
    return 0;
  }
  printf("packed %s -> %s\n", o.input, o.out_dir);
  printf("  samples   %lld read: %lld train, %lld val, %lld skipped\n", (long long)rep.read,
         (long long)rep.n_train, (long long)rep.n_val, (long long)rep.skipped);
  for (int r = 0; r < ampc_pack_skip_reasons(); r++)
    if (rep.skipped_by[r])
      printf("    skipped %-18s %lld\n", ampc_pack_skip_reason(r), (long long)rep.skipped_by[r]);
  printf("  captions  %lld cut to --seq-len\n", (long long)rep.truncated_captions);
  printf("  tokenizer %d pieces (tokenizer.model)%s\n", rep.vocab,
         rep.n_classes ? "" : "; no labels");
  if (rep.n_classes)
    printf("  classes   %d (zero-shot prompts in manifest.json)\n", rep.n_classes);
  printf("  shards    %lld (%lld from an earlier run)\n", (long long)rep.shards,
         (long long)rep.resumed_shards);
  printf("  time      %.1f s (%.0f samples/s)\n", rep.seconds,
         rep.seconds > 0 ? (double)rep.read / rep.seconds : 0.0);
  printf("train on it: ampc train --data %s\n", o.out_dir);
  return 0;
}
