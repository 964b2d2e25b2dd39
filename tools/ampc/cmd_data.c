/*
 * tools/ampc/cmd_data.c: `ampc data emoji` (prepare the emoji image-text
 * dataset from the npm packages) and `ampc data info` (summarise a dataset
 * file, the embedded default, or Fashion-MNIST).
 *
 * `data emoji` runs `npm pack` and `tar` as child processes (posix_spawnp, no
 * shell), in a fresh temporary directory that it removes afterwards; their
 * standard output goes to stderr so that stdout carries only the report. The
 * preparation itself is ampc_emoji_prepare (src/data/emoji_prep.c).
 */
#define _XOPEN_SOURCE 700 /* mkdtemp, nftw, posix_spawn */

#include "cli.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <ftw.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ampc/data.h"
#include "ampc/shards.h"

extern char **environ;

static const char k_usage[] =
    "Usage: ampc data pack INPUT --out DIR [options]   (your own captioned images:\n"
    "                                                   `ampc data pack --help`)\n"
    "       ampc data emoji --out FILE [--styles LIST] [--hold-out STYLE]\n"
    "                       [--from DIR] [--json]\n"
    "       ampc data info [FILE|PACK] [--json]\n"
    "       ampc data info --fashion-mnist [DIR] [--json]\n"
    "\n"
    "emoji   Prepare the emoji image-text dataset (docs/DATA.md): fetch the npm\n"
    "        packages of the artwork styles and emojibase-data@17.0.0 with `npm pack`\n"
    "        (or take the .tgz files from --from DIR), unpack them with tar (and\n"
    "        render openmoji's SVGs to 64x64 PNGs with rsvg-convert), join the emoji,\n"
    "        decode and downsample the images, tokenize the captions and write FILE.\n"
    "        The report (join counts, skipped emoji, concepts per split) goes to\n"
    "        stdout. The repository ships the default as data/emoji.ampcds, which is\n"
    "        compiled into the library.\n"
    "info    Summarise a dataset: samples per split and style, classes with counts,\n"
    "        vocabulary size and example captions. Without FILE: the dataset\n"
    "        embedded in the library. --fashion-mnist reads Fashion-MNIST's gzipped\n"
    "        IDX files from DIR (default /usr/share/datasets/fashion-mnist, Debian's\n"
    "        dataset-fashion-mnist).\n"
    "\n"
    "Options:\n"
    "  --out FILE            where `emoji` writes the dataset\n"
    "  --styles LIST         comma-separated artwork styles (default\n"
    "                        google,openmoji,twitter, the bundled file's), each\n"
    "                        once, in sample order:\n"
    "    google    emoji-datasource-google@16.0.0 (Noto, Apache-2.0)\n"
    "    twitter   emoji-datasource-twitter@16.0.0 (Twemoji, CC-BY-4.0)\n"
    "    openmoji  openmoji@17.0.0 (CC-BY-SA-4.0; needs rsvg-convert, Debian's\n"
    "              librsvg2-bin)\n"
    "    apple     emoji-datasource-apple@16.0.0 (images (c) Apple Inc., not\n"
    "              licensed for commercial use: for your own use)\n"
    "    facebook  emoji-datasource-facebook@16.0.0 (images (c) Meta, no clear\n"
    "              licence: for your own use)\n"
    "  --hold-out STYLE      the style whose images of the training concepts form the\n"
    "                        new-style split (default twitter when listed, else none;\n"
    "                        `ampc train --hold-out-style` can choose another later)\n"
    "  --from DIR            directory holding the .tgz files\n"
    "                        (<package>-<version>.tgz; no npm)\n"
    "  --fashion-mnist [DIR] `info` on Fashion-MNIST\n"
    "  --json                print one JSON object\n"
    "  -h, --help            show this help\n";

#define FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"

/* the artwork styles' packages (docs/DATA.md, data/LICENSES.md) */
typedef struct style_pkg {
  const char *style, *package, *version;
  int redistributable; /* may the images be shared (the bundled file's styles) */
} style_pkg;
static const style_pkg k_style_pkgs[] = {
    {"google", "emoji-datasource-google", "16.0.0", 1},
    {"twitter", "emoji-datasource-twitter", "16.0.0", 1},
    {"openmoji", "openmoji", "17.0.0", 1},
    {"apple", "emoji-datasource-apple", "16.0.0", 0},
    {"facebook", "emoji-datasource-facebook", "16.0.0", 0},
};
enum { N_STYLE_PKGS = (int)(sizeof k_style_pkgs / sizeof k_style_pkgs[0]) };
static const char *const k_emojibase[2] = {"emojibase-data", "17.0.0"};
#define DEFAULT_STYLES "google,openmoji,twitter"
static const char *const k_split_names[4] = {"train", "new_style", "zero_shot", "test"};

/* ---- child processes and the temporary directory -------------------------- */

/* Run argv (found on PATH) with its stdout sent to our stderr; returns its
 * exit status, or -1 when it could not be started or did not exit. */
static int spawn_wait(char *const argv[]) {
  posix_spawn_file_actions_t fa;
  if (posix_spawn_file_actions_init(&fa) != 0)
    return -1;
  posix_spawn_file_actions_adddup2(&fa, STDERR_FILENO, STDOUT_FILENO);
  pid_t pid;
  fflush(stderr);
  const int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0)
    return -1;
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
    return -1;
  return WEXITSTATUS(status);
}

/* snprintf into a path buffer; 0 when it did not fit. */
static int path_fmt(char *buf, size_t size, const char *fmt, ...) AMPC_PRINTF(3, 4);
static int path_fmt(char *buf, size_t size, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  const int n = vsnprintf(buf, size, fmt, ap);
  va_end(ap);
  return n >= 0 && (size_t)n < size;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  return remove(path);
}

static void remove_tree(const char *dir) { nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

/* ---- `ampc data emoji` ---------------------------------------------------- */

static cJSON *stats_json(const ampc_emoji_prep_stats *s) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "datasource_entries", s->datasource_entries);
  cJSON_AddNumberToObject(o, "emojibase_entries", s->emojibase_entries);
  cJSON_AddNumberToObject(o, "joined_unified", s->joined_unified);
  cJSON_AddNumberToObject(o, "joined_non_qualified", s->joined_non_qualified);
  cJSON_AddNumberToObject(o, "skipped_unmatched", s->skipped_unmatched);
  cJSON_AddNumberToObject(o, "skipped_duplicate", s->skipped_duplicate);
  cJSON_AddNumberToObject(o, "skipped_no_group", s->skipped_no_group);
  cJSON_AddNumberToObject(o, "skipped_component", s->skipped_component);
  cJSON_AddNumberToObject(o, "skipped_no_image", s->skipped_no_image);
  cJSON_AddNumberToObject(o, "concepts", s->concepts);
  cJSON_AddNumberToObject(o, "train_concepts", s->train_concepts);
  cJSON_AddNumberToObject(o, "zero_shot_concepts", s->zero_shot_concepts);
  cJSON_AddNumberToObject(o, "max_caption_words", s->max_caption_words);
  cJSON_AddNumberToObject(o, "truncated_captions", s->truncated_captions);
  return o;
}

/* Render every color/svg/<HEX>.svg of the unpacked openmoji package `pkg`
 * to pkg/64/<HEX>.png (64x64) with rsvg-convert. 0 on success. */
static int render_openmoji(const char *pkg) {
  char svgdir[4200], pngdir[4200];
  if (!path_fmt(svgdir, sizeof svgdir, "%s/color/svg", pkg) ||
      !path_fmt(pngdir, sizeof pngdir, "%s/64", pkg))
    return cli_runtime_error("data", "%s: directory name too long", pkg);
  DIR *dir = opendir(svgdir);
  if (!dir)
    return cli_runtime_error("data", "%s: cannot open (is this the openmoji package?)", svgdir);
  if (mkdir(pngdir, 0700) != 0) {
    closedir(dir);
    return cli_runtime_error("data", "%s: cannot create", pngdir);
  }
  fprintf(stderr, "ampc data: rendering openmoji's SVGs to 64x64 PNGs with rsvg-convert\n");
  int rc = AMPC_EXIT_OK, count = 0;
  for (struct dirent *e; rc == AMPC_EXIT_OK && (e = readdir(dir)) != NULL;) {
    const size_t len = strlen(e->d_name);
    if (len < 5 || strcmp(e->d_name + len - 4, ".svg") != 0 || e->d_name[0] == '.')
      continue;
    char in[8400], out[8400];
    if (!path_fmt(in, sizeof in, "%s/%s", svgdir, e->d_name) ||
        !path_fmt(out, sizeof out, "%s/%.*s.png", pngdir, (int)(len - 4), e->d_name)) {
      rc = cli_runtime_error("data", "%s: file name too long", e->d_name);
      break;
    }
    char *argv[] = {"rsvg-convert", "-w", "64", "-h", "64", "-f", "png", "-o", out, in, NULL};
    const int r = spawn_wait(argv);
    if (r == -1 && count == 0)
      rc = cli_runtime_error("data", "cannot run rsvg-convert, which the openmoji style needs "
                                     "(apt-get install librsvg2-bin)");
    else if (r != 0)
      rc = cli_runtime_error("data", "%s: rsvg-convert failed (exit %d)", in, r);
    count++;
  }
  closedir(dir);
  if (rc == AMPC_EXIT_OK)
    fprintf(stderr, "ampc data: rendered %d openmoji images\n", count);
  return rc;
}

static int run_emoji(int argc, char **argv) {
  const char *out = NULL, *from = NULL, *styles_arg = DEFAULT_STYLES, *hold_arg = NULL;
  int json = 0;
  for (int i = 2; i < argc; i++) {
    if (strcmp(argv[i], "--out") == 0 && i + 1 < argc)
      out = argv[++i];
    else if (strcmp(argv[i], "--from") == 0 && i + 1 < argc)
      from = argv[++i];
    else if (strcmp(argv[i], "--styles") == 0 && i + 1 < argc)
      styles_arg = argv[++i];
    else if (strcmp(argv[i], "--hold-out") == 0 && i + 1 < argc)
      hold_arg = argv[++i];
    else if (strcmp(argv[i], "--json") == 0)
      json = 1;
    else
      return cli_usage_error("data", "unexpected argument '%s' to 'data emoji'", argv[i]);
  }
  if (!out)
    return cli_usage_error("data", "'data emoji' needs --out FILE");
  /* the styles */
  const style_pkg *sty[AMPC_EMOJI_MAX_STYLES];
  int ns = 0, held = -1;
  {
    char list[256];
    if (!path_fmt(list, sizeof list, "%s", styles_arg))
      return cli_usage_error("data", "--styles: list too long");
    const size_t ll = strlen(list);
    if (ll == 0 || list[0] == ',' || list[ll - 1] == ',' || strstr(list, ",,"))
      return cli_usage_error("data", "--styles: an empty item in '%s'", styles_arg);
    for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
      const style_pkg *sp = NULL;
      for (int k = 0; k < N_STYLE_PKGS; k++)
        if (strcmp(k_style_pkgs[k].style, tok) == 0)
          sp = &k_style_pkgs[k];
      if (!sp)
        return cli_usage_error("data",
                               "--styles: unknown style '%s' (google, twitter, openmoji, apple, "
                               "facebook)",
                               tok);
      for (int j = 0; j < ns; j++)
        if (sty[j] == sp)
          return cli_usage_error("data", "--styles: '%s' is listed twice", tok);
      if (ns == AMPC_EMOJI_MAX_STYLES)
        return cli_usage_error("data", "--styles: at most %d styles", AMPC_EMOJI_MAX_STYLES);
      sty[ns++] = sp;
    }
    if (ns == 0)
      return cli_usage_error("data", "--styles: no style given");
    const char *h = hold_arg ? hold_arg : "twitter";
    for (int j = 0; j < ns; j++)
      if (strcmp(sty[j]->style, h) == 0)
        held = j;
    if (hold_arg && strcmp(hold_arg, "none") != 0 && held < 0)
      return cli_usage_error("data", "--hold-out: '%s' is not one of --styles %s", hold_arg,
                             styles_arg);
    if (held >= 0 && ns == 1)
      return cli_usage_error("data", "--hold-out %s would leave no style to train on",
                             sty[held]->style);
  }
  for (int j = 0; j < ns; j++)
    if (!sty[j]->redistributable)
      fprintf(stderr,
              "ampc data: note: the %s images (%s) are not licensed for redistribution "
              "(emoji-datasource's README: Apple's not for commercial use, Facebook's without "
              "clear licensing): keep %s for your own use, do not commit or share it "
              "(data/LICENSES.md)\n",
              sty[j]->style, sty[j]->package, out);

  const char *tmpdir = getenv("TMPDIR");
  char tmp[2048];
  if (!path_fmt(tmp, sizeof tmp, "%s/ampc-emoji-XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp"))
    return cli_runtime_error("data", "TMPDIR is too long");
  if (!mkdtemp(tmp))
    return cli_runtime_error("data", "%s: cannot create a temporary directory", tmp);
  int rc = AMPC_EXIT_OK;
  const int npk = ns + 1; /* the styles, then emojibase-data */
  char tgz[AMPC_EMOJI_MAX_STYLES + 1][4096], pkg[AMPC_EMOJI_MAX_STYLES + 1][4096];
  char spec[AMPC_EMOJI_MAX_STYLES + 1][128];
  for (int k = 0; k < npk; k++) {
    const char *name = k < ns ? sty[k]->package : k_emojibase[0];
    const char *ver = k < ns ? sty[k]->version : k_emojibase[1];
    snprintf(spec[k], sizeof spec[k], "%s@%s", name, ver);
    if (!path_fmt(tgz[k], sizeof tgz[k], "%s/%s-%s.tgz", from ? from : tmp, name, ver)) {
      rc = cli_runtime_error("data", "%s: directory name too long", from ? from : tmp);
      goto done;
    }
  }
  if (!from) {
    char *npm[AMPC_EMOJI_MAX_STYLES + 7] = {"npm", "pack", "--silent", "--pack-destination", tmp};
    int na = 5;
    for (int k = 0; k < npk; k++)
      npm[na++] = spec[k];
    npm[na] = NULL;
    fprintf(stderr, "ampc data: npm pack");
    for (int k = 0; k < npk; k++)
      fprintf(stderr, " %s", spec[k]);
    fprintf(stderr, "\n");
    if (spawn_wait(npm) != 0) {
      rc = cli_runtime_error("data", "`npm pack` failed (is npm installed and the registry "
                                     "reachable? or pass --from DIR with the .tgz files)");
      goto done;
    }
  }
  for (int k = 0; k < npk; k++) {
    if (access(tgz[k], R_OK) != 0) {
      rc = cli_runtime_error("data", "%s: cannot read", tgz[k]);
      goto done;
    }
    char dest[2100];
    path_fmt(dest, sizeof dest, "%s/%d", tmp, k); /* tmp is < 2048 bytes */
    path_fmt(pkg[k], sizeof pkg[k], "%s/package", dest);
    char *tar[] = {"tar", "-xzf", tgz[k], "-C", dest, NULL};
    if (mkdir(dest, 0700) != 0 || spawn_wait(tar) != 0) {
      rc = cli_runtime_error("data", "%s: cannot unpack with tar into %s", tgz[k], dest);
      goto done;
    }
    if (k < ns && strcmp(sty[k]->style, "openmoji") == 0 &&
        (rc = render_openmoji(pkg[k])) != AMPC_EXIT_OK)
      goto done;
  }
  ampc_emoji_source src[AMPC_EMOJI_MAX_STYLES];
  for (int k = 0; k < ns; k++)
    src[k].style = sty[k]->style, src[k].dir = pkg[k];
  ampc_dataset d;
  ampc_emoji_prep_stats s;
  if (ampc_emoji_prepare_styles(src, ns, pkg[ns], held, &d, &s) != AMPC_OK ||
      ampc_dataset_save(&d, out) != AMPC_OK) {
    rc = cli_runtime_error("data", "%s", ampc_last_error());
    ampc_dataset_free(&d);
    goto done;
  }
  int32_t per_split[4] = {0, 0, 0, 0};
  for (int32_t i = 0; i < d.n; i++)
    per_split[d.split[i]]++;
  if (json) {
    cJSON *o = stats_json(&s);
    cJSON_AddStringToObject(o, "out", out);
    cJSON_AddNumberToObject(o, "samples", d.n);
    cJSON_AddNumberToObject(o, "vocab", d.vocab);
    cJSON_AddNumberToObject(o, "n_classes", d.n_classes);
    cJSON *sp = cJSON_AddObjectToObject(o, "splits");
    for (int k = 0; k < 3; k++)
      cJSON_AddNumberToObject(sp, k_split_names[k], per_split[k]);
    cJSON *sa = cJSON_AddArrayToObject(o, "styles");
    cJSON *mi = cJSON_AddObjectToObject(o, "missing_in_style");
    for (int k = 0; k < ns; k++) {
      cJSON_AddItemToArray(sa, cJSON_CreateString(sty[k]->style));
      cJSON_AddNumberToObject(mi, sty[k]->style, s.missing_in_style[k]);
    }
    if (held >= 0)
      cJSON_AddStringToObject(o, "held_out_style", sty[held]->style);
    else
      cJSON_AddNullToObject(o, "held_out_style");
    rc = cli_print_json("data", o);
  } else {
    printf("emoji-datasource entries  %d (emojibase-data entries %d)\n", s.datasource_entries,
           s.emojibase_entries);
    printf("joined                    %d on unified + %d on non_qualified\n", s.joined_unified,
           s.joined_non_qualified);
    printf("skipped                   %d unmatched, %d duplicate, %d without group, "
           "%d component, %d without an image in every style\n",
           s.skipped_unmatched, s.skipped_duplicate, s.skipped_no_group, s.skipped_component,
           s.skipped_no_image);
    printf("styles                    ");
    for (int k = 0; k < ns; k++)
      printf("%s%s%s", k ? ", " : "", sty[k]->style, k == held ? " (held out)" : "");
    printf("\n");
    if (s.skipped_no_image > 0) {
      printf("first missing image in    ");
      for (int k = 0; k < ns; k++)
        printf("%s%s %d", k ? ", " : "", sty[k]->style, s.missing_in_style[k]);
      printf("\n");
    }
    printf("concepts                  %d (%d training, %d held out for zero-shot)\n", s.concepts,
           s.train_concepts, s.zero_shot_concepts);
    printf("captions                  longest %d words, %d truncated to %d tokens\n",
           s.max_caption_words, s.truncated_captions, d.seq_len);
    printf("samples                   %d: train %d, new_style %d, zero_shot %d\n", d.n,
           per_split[0], per_split[1], per_split[2]);
    printf("vocabulary                %d (with <pad> and <unk>), classes %d\n", d.vocab,
           d.n_classes);
    printf("wrote                     %s\n", out);
  }
  ampc_dataset_free(&d);
done:
  remove_tree(tmp);
  return rc;
}

/* ---- `ampc data info` ----------------------------------------------------- */

/* Fraction of the non-pad tokens of split sp that are <unk>. */
static double unk_fraction(const ampc_dataset *d, int sp) {
  int64_t tok = 0, unk = 0;
  for (int32_t i = 0; i < d->n; i++)
    if (d->split[i] == sp)
      for (int32_t t = 0; t < d->seq_len; t++) {
        const int32_t v = d->tokens[(int64_t)i * d->seq_len + t];
        tok += v != AMPC_TOKEN_PAD;
        unk += v == AMPC_TOKEN_UNK;
      }
  return tok ? (double)unk / (double)tok : 0.0;
}

/* `ampc data info DIR` on a packed dataset: its manifest's facts, every
 * shard checked (header, size, SHA-256) */
static int pack_info(const char *path, int json) {
  ampc_shards *sh;
  if (ampc_shards_open(&sh, path, true, false) != AMPC_OK)
    return cli_runtime_error("data", "%s", ampc_last_error());
  const ampc_shards_info *in = ampc_shards_get_info(sh);
  if (json) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "source", path);
    cJSON_AddStringToObject(o, "format", "ampc-shards");
    cJSON_AddNumberToObject(o, "train", (double)in->n_train);
    cJSON_AddNumberToObject(o, "val", (double)in->n_val);
    cJSON_AddNumberToObject(o, "image_size", in->image_size);
    cJSON_AddNumberToObject(o, "seq_len", in->seq_len);
    cJSON_AddNumberToObject(o, "vocab", in->vocab);
    cJSON_AddNumberToObject(o, "classes", in->class_names ? in->n_classes : 0);
    cJSON_AddNumberToObject(o, "shards", (double)in->n_shards);
    cJSON_AddNumberToObject(o, "bad_shards", (double)in->bad_shards);
    ampc_shards_close(sh);
    return cli_print_json("data", o);
  }
  printf("source      %s (packed by `ampc data pack`)\n", path);
  printf("samples     train %lld, val %lld, in %lld shards (SHA-256 checked)\n",
         (long long)in->n_train, (long long)in->n_val, (long long)in->n_shards);
  printf("images      %dx%dx%d uint8 (HWC)\n", in->image_size, in->image_size, in->channels);
  printf("captions    %d tokens each (SentencePiece, %d pieces: %s)\n", in->seq_len, in->vocab,
         in->tokenizer ? in->tokenizer : "?");
  if (in->class_names) {
    printf("classes     %d:", in->n_classes);
    for (int32_t c = 0; c < in->n_classes && c < 12; c++)
      printf("%s %s", c ? "," : "", in->class_names[c]);
    printf("%s\n", in->n_classes > 12 ? ", ..." : "");
  } else {
    printf("classes     none (no --label-key)\n");
  }
  for (int64_t i = 0; i < in->bad_shards; i++)
    printf("warning     %s\n", in->bad_shard_notes[i]);
  const int rc = in->bad_shards ? AMPC_EXIT_ERROR : AMPC_EXIT_OK; /* before the close */
  ampc_shards_close(sh);
  return rc;
}

static int run_info(int argc, char **argv) {
  const char *file = NULL, *fm_dir = NULL;
  int json = 0, fm = 0;
  for (int i = 2; i < argc; i++) {
    if (strcmp(argv[i], "--json") == 0)
      json = 1;
    else if (strcmp(argv[i], "--fashion-mnist") == 0) {
      fm = 1;
      if (i + 1 < argc && argv[i + 1][0] != '-')
        fm_dir = argv[++i];
    } else if (argv[i][0] != '-' && !file)
      file = argv[i];
    else
      return cli_usage_error("data", "unexpected argument '%s' to 'data info'", argv[i]);
  }
  if (fm && file)
    return cli_usage_error("data", "give either FILE or --fashion-mnist [DIR], not both");
  if (file && cli_is_pack(file))
    return pack_info(file, json);
  ampc_dataset d;
  ampc_status st;
  const char *source;
  if (fm) {
    source = fm_dir ? fm_dir : FASHION_MNIST_DIR;
    st = ampc_fashion_mnist_load(source, &d);
  } else if (file) {
    source = file;
    st = ampc_dataset_load(file, &d);
  } else {
    source = "embedded";
    st = ampc_dataset_load_default(&d);
  }
  if (st != AMPC_OK)
    return cli_runtime_error("data", "%s", ampc_last_error());

  int32_t per_split[4] = {0, 0, 0, 0}, concepts = 0;
  int32_t *cls = calloc((size_t)d.n_classes * 5, sizeof *cls); /* [class][total, split 0..3] */
  uint8_t *seen = calloc((size_t)d.n + 1, 1);
  if (!cls || !seen) {
    free(cls);
    free(seen);
    ampc_dataset_free(&d);
    return cli_runtime_error("data", "out of memory");
  }
  for (int32_t i = 0; i < d.n; i++) {
    per_split[d.split[i]]++;
    cls[d.label[i] * 5]++;
    cls[d.label[i] * 5 + 1 + d.split[i]]++;
    if (d.concept[i] < d.n && !seen[d.concept[i]]) {
      seen[d.concept[i]] = 1;
      concepts++;
    }
  }
  free(seen);
  /* one example per split: the first sample of it */
  int32_t example[4] = {-1, -1, -1, -1};
  for (int32_t i = d.n - 1; i >= 0; i--)
    example[d.split[i]] = i;

  int rc = AMPC_EXIT_OK;
  if (json) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "source", source);
    cJSON_AddNumberToObject(o, "n", d.n);
    cJSON *img = cJSON_AddObjectToObject(o, "image");
    cJSON_AddNumberToObject(img, "height", d.height);
    cJSON_AddNumberToObject(img, "width", d.width);
    cJSON_AddNumberToObject(img, "channels", d.channels);
    cJSON_AddNumberToObject(o, "seq_len", d.seq_len);
    cJSON_AddNumberToObject(o, "vocab", d.vocab);
    cJSON_AddNumberToObject(o, "n_classes", d.n_classes);
    cJSON_AddNumberToObject(o, "concepts", concepts);
    cJSON *sp = cJSON_AddObjectToObject(o, "splits");
    for (int k = 0; k < 4; k++)
      if (per_split[k])
        cJSON_AddNumberToObject(sp, k_split_names[k], per_split[k]);
    if (d.tokens) { /* image-text data: samples per artwork style and split */
      cJSON *sa = cJSON_AddArrayToObject(o, "styles");
      const int ns = d.style_names ? d.n_styles : 2;
      for (int y = 0; y < ns; y++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "name", ampc_dataset_style_name(&d, y));
        for (int k = 0; k < 4; k++) {
          int32_t cnt = 0;
          for (int32_t i = 0; i < d.n; i++)
            cnt += d.style[i] == y && d.split[i] == k;
          if (per_split[k])
            cJSON_AddNumberToObject(e, k_split_names[k], cnt);
        }
        cJSON_AddItemToArray(sa, e);
      }
    }
    cJSON *ca = cJSON_AddArrayToObject(o, "classes");
    for (int32_t c = 0; c < d.n_classes; c++) {
      cJSON *e = cJSON_CreateObject();
      cJSON_AddNumberToObject(e, "id", c);
      if (d.class_names)
        cJSON_AddStringToObject(e, "name", d.class_names[c]);
      cJSON_AddNumberToObject(e, "count", cls[c * 5]);
      for (int k = 0; k < 4; k++)
        if (per_split[k])
          cJSON_AddNumberToObject(e, k_split_names[k], cls[c * 5 + 1 + k]);
      cJSON_AddItemToArray(ca, e);
    }
    if (d.seq_len > 0) {
      cJSON *u = cJSON_AddObjectToObject(o, "unk_fraction");
      for (int k = 0; k < 4; k++)
        if (per_split[k])
          cJSON_AddNumberToObject(u, k_split_names[k], unk_fraction(&d, k));
    }
    cJSON *ex = cJSON_AddArrayToObject(o, "examples");
    for (int k = 0; k < 4; k++) {
      const int32_t i = example[k];
      if (i < 0)
        continue;
      cJSON *e = cJSON_CreateObject();
      cJSON_AddNumberToObject(e, "index", i);
      cJSON_AddStringToObject(e, "split", k_split_names[k]);
      cJSON_AddNumberToObject(e, "label", d.label[i]);
      if (d.captions)
        cJSON_AddStringToObject(e, "caption", d.captions[i]);
      if (d.seq_len > 0) {
        cJSON *t = cJSON_AddArrayToObject(e, "tokens");
        for (int32_t j = 0; j < d.seq_len; j++)
          cJSON_AddItemToArray(t, cJSON_CreateNumber(d.tokens[(int64_t)i * d.seq_len + j]));
      }
      cJSON_AddItemToArray(ex, e);
    }
    rc = cli_print_json("data", o);
  } else {
    printf("source      %s\n", source);
    printf("samples     %d, images %dx%dx%d uint8 (HWC)", d.n, d.height, d.width, d.channels);
    if (concepts != d.n)
      printf(", %d concepts", concepts);
    printf("\n");
    if (d.seq_len > 0)
      printf("captions    %d tokens each (0 = <pad>, 1 = <unk>), vocabulary %d\n", d.seq_len,
             d.vocab);
    printf("splits     ");
    for (int k = 0; k < 4; k++)
      if (per_split[k])
        printf(" %s %d", k_split_names[k], per_split[k]);
    printf("\n");
    if (d.tokens) {
      printf("styles     ");
      const int ns = d.style_names ? d.n_styles : 2;
      for (int y = 0; y < ns; y++) {
        int32_t tr = 0, nw = 0;
        for (int32_t i = 0; i < d.n; i++)
          if (d.style[i] == y)
            tr += d.split[i] == AMPC_SPLIT_TRAIN, nw += d.split[i] == AMPC_SPLIT_NEW_STYLE;
        printf(" %s (%s)%s", ampc_dataset_style_name(&d, y),
               nw   ? "held out: new_style"
               : tr ? "train"
                    : "zero_shot only",
               y + 1 < ns ? "," : "");
      }
      printf("\n");
    }
    if (d.seq_len > 0) {
      printf("<unk> rate ");
      for (int k = 0; k < 4; k++)
        if (per_split[k])
          printf(" %s %.3f", k_split_names[k], unk_fraction(&d, k));
      printf("\n");
    }
    printf("classes     %d\n", d.n_classes);
    printf("  %-3s %-18s %7s", "id", "name", "total");
    for (int k = 0; k < 4; k++)
      if (per_split[k])
        printf(" %10s", k_split_names[k]);
    printf("\n");
    for (int32_t c = 0; c < d.n_classes; c++) {
      printf("  %-3d %-18s %7d", c, d.class_names ? d.class_names[c] : "", cls[c * 5]);
      for (int k = 0; k < 4; k++)
        if (per_split[k])
          printf(" %10d", cls[c * 5 + 1 + k]);
      printf("\n");
    }
    printf("examples\n");
    for (int k = 0; k < 4; k++) {
      const int32_t i = example[k];
      if (i < 0)
        continue;
      printf("  #%d %s, class %s", i, k_split_names[k],
             d.class_names ? d.class_names[d.label[i]] : "");
      if (d.captions)
        printf(": \"%s\"", d.captions[i]);
      if (d.seq_len > 0) {
        printf(" ->");
        for (int32_t j = 0; j < d.seq_len && d.tokens[(int64_t)i * d.seq_len + j]; j++)
          printf(" %d", d.tokens[(int64_t)i * d.seq_len + j]);
      }
      printf("\n");
    }
  }
  free(cls);
  ampc_dataset_free(&d);
  return rc;
}

static int run(int argc, char **argv) {
  if (argc < 2)
    return cli_usage_error("data", "missing subcommand (pack, emoji or info)");
  if (strcmp(argv[1], "emoji") == 0)
    return run_emoji(argc, argv);
  if (strcmp(argv[1], "info") == 0)
    return run_info(argc, argv);
  if (strcmp(argv[1], "pack") == 0)
    return cmd_data_pack(argc, argv);
  return cli_usage_error("data", "unknown subcommand '%s' (pack, emoji or info)", argv[1]);
}

const ampc_command ampc_cmd_data = {
    .name = "data",
    .summary = "prepare the emoji data, summarise datasets (emoji, Fashion-MNIST)",
    .usage = k_usage,
    .run = run,
};
