// CSV tables (issue 38): the RFC 4180 reader (quotes, CRLF, embedded commas and line breaks,
// empty fields, UTF-8, blocks smaller than a record) and the encoding of a table as samples
// (standardization and one-hot against values computed by hand, imputation, class order), with
// the errors that name file, line and column; regression targets and their metrics.
#include <cmath>
#include <fstream>

#include "libgenesis/core/error.h"
#include "libgenesis/data/csv_reader.h"
#include "libgenesis/data/csv_table.h"
#include "libgenesis/nn/layers.h"
#include "libgenesis/ops/factory.h"
#include "libgenesis/train/trainer.h"
#include "tests/testing.h"

namespace fs = std::filesystem;
using namespace genesis;
using Catch::Matchers::Contains;
using Rows = std::vector<std::vector<std::string>>;

namespace {

fs::path write_text(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

// Every record of the file, with the line each starts on.
std::pair<Rows, std::vector<int64_t>> read_all(const fs::path& path, size_t block_bytes) {
  data::CsvReader reader(path, block_bytes);
  Rows rows;
  std::vector<int64_t> lines;
  std::vector<std::string> fields;
  while (reader.next(fields)) {
    rows.push_back(fields);
    lines.push_back(reader.line());
  }
  return {rows, lines};
}

}  // namespace

TEST_CASE("csv reader: quotes, CRLF, embedded commas and line breaks, empty fields, UTF-8", "[cpu][csv]") {
  testing::TempDir tmp;
  const std::string text =
      "\xEF\xBB\xBF"  // a byte-order mark, dropped
      "a,b,c\r\n"
      "\"x, y\",\"say \"\"hi\"\"\",\r\n"  // a comma and doubled quotes inside quotes; an empty last field
      "\"two\nlines\",,\xC3\xA5rhus\n"    // a line break inside quotes; an empty middle field; UTF-8
      "\n"                                // an empty line, skipped
      "1,2,3";                            // no line break at the end
  const fs::path path = write_text(tmp / "t.csv", text);
  const Rows expected{{"a", "b", "c"}, {"x, y", "say \"hi\"", ""}, {"two\nlines", "", "\xC3\xA5rhus"}, {"1", "2", "3"}};
  // Blocks of 4 bytes split the mark, a CRLF and quoted fields across reads: the same records.
  for (const size_t block : {size_t{4}, size_t{7}, size_t{1} << 20}) {
    const auto [rows, lines] = read_all(path, block);
    CHECK(rows == expected);
    CHECK(lines == std::vector<int64_t>{1, 2, 3, 6});
  }
}

TEST_CASE("csv reader: a lone CR ends a record, a quote inside an unquoted field is text", "[cpu][csv]") {
  testing::TempDir tmp;
  const auto [rows, lines] = read_all(write_text(tmp / "t.csv", "a,b\rx\"y,\"\"\r"), 1 << 20);
  CHECK(rows == Rows{{"a", "b"}, {"x\"y", ""}});
  CHECK(lines == std::vector<int64_t>{1, 2});
}

TEST_CASE("csv reader: an open quote and text after a closing quote name file and line", "[cpu][csv]") {
  testing::TempDir tmp;
  CHECK_THROWS_WITH(read_all(write_text(tmp / "open.csv", "a,b\n1,\"2\n3,4\n"), 1 << 20),
                    Contains("open.csv:2: a quoted field of column 2 is not closed"));
  CHECK_THROWS_WITH(read_all(write_text(tmp / "after.csv", "a,b\n\n1,\"2\"x\n"), 1 << 20),
                    Contains("after.csv:3: text after the closing quote of column 2"));
  CHECK_THROWS_AS(data::CsvReader(tmp / "absent.csv"), UsageError);
}

TEST_CASE("csv table: standardization and one-hot with the training rows' statistics", "[cpu][csv]") {
  testing::TempDir tmp;
  // x: 1, 2, 3, 6 -> mean 3, population std sqrt((4 + 1 + 0 + 9) / 4) = sqrt(3.5).
  // color (categorical): red, blue, red, green -> categories blue, green, red.
  // k is constant: std 0, divided by 1.
  const fs::path path = write_text(tmp / "t.csv",
                                   "x,color,k,y\n"
                                   "1,red,5,cat\n"
                                   "2,blue,5,dog\n"
                                   "3,red,5,cat\n"
                                   "6,green,5,ant\n");
  const data::CsvOptions options{.label = "y", .categorical = {"color"}};
  const data::CsvTable table = data::read_csv_table(path, options);
  CHECK(table.features == std::vector<std::string>{"x", "color", "k"});
  const data::CsvEncoding e = data::fit_csv_encoding(table, data::all_csv_rows(table), options);
  REQUIRE(e.width() == 5);
  CHECK(e.features[0].mean == 3.0);
  CHECK(e.features[0].std == Approx(std::sqrt(3.5)).epsilon(1e-14));  // a few ulps of float64
  CHECK(e.features[1].categories == std::vector<std::string>{"blue", "green", "red"});
  CHECK(e.features[1].most_frequent == "red");
  CHECK(e.features[2].std == 1.0);
  CHECK(e.classes == std::vector<std::string>{"ant", "cat", "dog"});
  const data::Dataset ds = data::encode_csv(table, data::all_csv_rows(table), e);
  const double s = std::sqrt(3.5);
  // Each row: (x - 3) / s, one-hot(blue, green, red), k - 5.
  const std::vector<std::vector<double>> want{
      {-2 / s, 0, 0, 1, 0}, {-1 / s, 1, 0, 0, 0}, {0, 0, 0, 1, 0}, {3 / s, 0, 1, 0, 0}};
  for (size_t r = 0; r < want.size(); ++r)
    for (size_t c = 0; c < want[r].size(); ++c)
      CHECK(ds.inputs.data<float>()[r * 5 + c] == Approx(want[r][c]).margin(1e-7));  // f32 of a float64 value
  CHECK(std::vector<int64_t>(ds.targets.data<int64_t>(), ds.targets.data<int64_t>() + 4) ==
        std::vector<int64_t>{1, 2, 1, 0});
}

TEST_CASE("csv table: statistics of the training rows only, imputation, unseen categories, integer classes",
          "[cpu][csv]") {
  testing::TempDir tmp;
  const fs::path path = write_text(tmp / "t.csv",
                                   "y,x,c\n"
                                   "10,1,a\n"
                                   "2,,b\n"       // x missing: the training mean
                                   "10,3,\n"      // c missing: the most frequent category (a, b tie: a)
                                   "2,100,z\n");  // a held-out row: its x and category z take no part
  const data::CsvOptions options{.label = "y", .categorical = {"c"}, .impute = true};
  const data::CsvTable table = data::read_csv_table(path, options);
  const data::CsvEncoding e = data::fit_csv_encoding(table, {0, 1, 2}, options);
  CHECK(e.features[0].mean == 2.0);  // (1 + 3) / 2
  CHECK(e.features[0].std == 1.0);   // sqrt((1 + 1) / 2)
  CHECK(e.features[1].categories == std::vector<std::string>{"a", "b"});
  CHECK(e.features[1].most_frequent == "a");
  CHECK(e.classes == std::vector<std::string>{"2", "10"});  // numeric order, not "10" < "2"
  const data::Dataset ds = data::encode_csv(table, data::all_csv_rows(table), e);
  const std::vector<float> want{-1, 1, 0, /**/ 0, 0, 1, /**/ 1, 1, 0, /**/ 98, 0, 0};
  CHECK(std::vector<float>(ds.inputs.data<float>(), ds.inputs.data<float>() + 12) == want);
  CHECK(std::vector<int64_t>(ds.targets.data<int64_t>(), ds.targets.data<int64_t>() + 4) ==
        std::vector<int64_t>{1, 0, 1, 0});
}

TEST_CASE("csv table: bad input is one line naming file, line and column", "[cpu][csv]") {
  testing::TempDir tmp;
  const data::CsvOptions options{.label = "y"};
  const auto error_of = [&](const std::string& name, const std::string& text, const data::CsvOptions& o) {
    try {
      data::read_csv_table(write_text(tmp / name, text), o);
    } catch (const UsageError& e) {
      CHECK(std::string(e.what()).find('\n') == std::string::npos);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK_THAT(error_of("empty.csv", "", options), Contains("empty.csv: the file is empty"));
  CHECK_THAT(error_of("header.csv", "x,y\n", options), Contains("header.csv has a header but no rows"));
  CHECK_THAT(error_of("ragged.csv", "x,y\n1,a\n2,b,3\n", options),
             Contains("ragged.csv:3: 3 fields, but the header has 2 columns"));
  CHECK_THAT(error_of("text.csv", "x,y\n1,a\nabc,b\n", options),
             Contains("text.csv:3: column 'x' holds 'abc', which is not a finite number"));
  CHECK_THAT(error_of("label.csv", "x,z\n1,a\n", options), Contains("label.csv:1: no column 'y' (data.label)"));
  CHECK_THAT(error_of("missing.csv", "x,y\n1,a\n,b\n", options),
             Contains("missing.csv:3: column 'x' is empty; fill the value, or set data.impute"));
  CHECK_THAT(error_of("nolabel.csv", "x,y\n1,\n", options), Contains("nolabel.csv:2: the label column 'y' is empty"));
  CHECK_THAT(error_of("twice.csv", "x,x,y\n1,2,a\n", options), Contains("names column 'x' twice"));
  CHECK_THAT(error_of("cat.csv", "x,y\n1,a\n", data::CsvOptions{.label = "y", .categorical = {"w"}}),
             Contains("data.categorical names 'w'"));
  // Latin-1 (\xC5 alone), an overlong '/' and a surrogate are not UTF-8; the checkpoint's JSON holds only UTF-8.
  for (const char* value : {"\xC5rhus", "\xC0\xAF", "\xED\xA0\x80"})
    CHECK_THAT(error_of("latin1.csv", std::string("c,y\n") + value + ",a\n",
                        data::CsvOptions{.label = "y", .categorical = {"c"}}),
               Contains("latin1.csv:2: column 'c' holds a value that is not UTF-8 text"));
  CHECK_NOTHROW(data::read_csv_table(write_text(tmp / "utf8.csv", "c,y\n\xC3\x85rhus,\xF0\x9F\x90\x88\n"),
                                     data::CsvOptions{.label = "y", .categorical = {"c"}}));

  // A label of another file that the training rows do not have.
  const data::CsvTable train = data::read_csv_table(write_text(tmp / "train.csv", "x,y\n1,a\n2,b\n"), options);
  const data::CsvEncoding e = data::fit_csv_encoding(train, data::all_csv_rows(train), options);
  const data::CsvTable val = data::read_csv_table(write_text(tmp / "val.csv", "x,y\n1,a\n2,c\n"), options);
  CHECK_THROWS_WITH(data::encode_csv(val, data::all_csv_rows(val), e),
                    Contains("val.csv:3: label 'c' is not among the training data's classes (a, b)"));
  // A value whose standardized input an f32 cannot hold.
  const data::CsvTable huge = data::read_csv_table(write_text(tmp / "huge.csv", "x,y\n1,a\n1e300,b\n"), options);
  CHECK_THROWS_WITH(data::encode_csv(huge, data::all_csv_rows(huge), e),
                    Contains("huge.csv:3: column 'x' holds 1e+300, which is standardized beyond the range of an f32"));
}

TEST_CASE("csv encoding: JSON keeps every bit, and damaged JSON is an error naming the file", "[cpu][csv]") {
  testing::TempDir tmp;
  const data::CsvOptions options{.label = "y", .categorical = {"c"}};
  const data::CsvTable table =
      data::read_csv_table(write_text(tmp / "t.csv", "x,c,y\n0.1,b,1\n0.7,a,2\n1e300,a,1\n"), options);
  const data::CsvEncoding e = data::fit_csv_encoding(table, data::all_csv_rows(table), options);
  const data::CsvEncoding back = data::parse_csv_encoding(data::csv_encoding_json(e), "data.json");
  CHECK(back.features[0].mean == e.features[0].mean);  // exact: bit for bit
  CHECK(back.features[0].std == e.features[0].std);
  CHECK(back.features[1].categories == e.features[1].categories);
  CHECK(back.features[1].most_frequent == "a");
  CHECK(back.classes == e.classes);
  CHECK(data::encode_csv(table, data::all_csv_rows(table), back).inputs.numel() == 9);
  CHECK_THROWS_WITH(data::parse_csv_encoding("{\"format\": 1}", "ckpt/data.json"),
                    Contains("ckpt/data.json: not a CSV encoding written by genesis"));
  CHECK_THROWS_AS(data::parse_csv_encoding("not json", "data.json"), ValueError);
}

TEST_CASE("csv regression: numeric labels standardized with the training rows', kept in the JSON, bad labels named",
          "[cpu][csv]") {
  testing::TempDir tmp;
  // price: 10, 20, 30, 60 over the training rows 0-3 -> mean 30, std sqrt((400 + 100 + 0 + 900) / 4).
  const fs::path path = write_text(tmp / "t.csv", "x,price\n1,10\n2,20\n3,30\n4,60\n5,-5.5\n");
  const data::CsvOptions options{.label = "price", .regression = true};
  const data::CsvTable table = data::read_csv_table(path, options);
  const data::CsvEncoding e = data::fit_csv_encoding(table, {0, 1, 2, 3}, options);
  REQUIRE(e.target.has_value());
  CHECK(e.classes.empty());
  CHECK(e.target->name == "price");
  CHECK(e.target->mean == 30.0);
  const double s = std::sqrt(350.0);
  CHECK(e.target->std == Approx(s).epsilon(1e-14));
  const data::Dataset ds = data::encode_csv(table, data::all_csv_rows(table), e);
  REQUIRE(ds.targets.shape() == Shape{5, 1});
  REQUIRE(ds.targets.dtype() == DType::f32);
  const std::vector<double> want{-20 / s, -10 / s, 0, 30 / s, -35.5 / s};  // the 5th row with the training statistics
  for (size_t r = 0; r < want.size(); ++r) CHECK(ds.targets.data<float>()[r] == Approx(want[r]).margin(1e-7));
  const data::CsvEncoding back = data::parse_csv_encoding(data::csv_encoding_json(e), "data.json");
  REQUIRE(back.target.has_value());
  CHECK(back.target->mean == e.target->mean);
  CHECK(back.target->std == e.target->std);
  // A classifier's encoding has no target; a damaged target is named.
  CHECK_FALSE(data::parse_csv_encoding(data::csv_encoding_json(data::fit_csv_encoding(
                                           table, {0, 1}, data::CsvOptions{.label = "price"})),
                                       "data.json")
                  .target.has_value());
  CHECK_THROWS_WITH(data::parse_csv_encoding(R"({"format": "genesis csv encoding", "standardize": true, "features": [],
                                                 "classes": [], "target": {"name": "p", "mean": 0, "std": 0}})",
                                             "ckpt/data.json"),
                    Contains("ckpt/data.json: the regression target needs a name, a mean and a std > 0"));
  // Without standardization the label is the target as it is.
  const data::CsvOptions raw{.label = "price", .standardize = false, .regression = true};
  const data::CsvEncoding plain = data::fit_csv_encoding(table, {0, 1, 2, 3}, raw);
  CHECK(data::encode_csv(table, {4}, plain).targets.data<float>()[0] == -5.5f);
  // A label that is no number: file and line, and what to do.
  const fs::path words = write_text(tmp / "w.csv", "x,price\n1,10\n2,cheap\n");
  const data::CsvTable worded = data::read_csv_table(words, options);
  CHECK_THROWS_WITH(data::fit_csv_encoding(worded, data::all_csv_rows(worded), options),
                    Contains("w.csv:3: label 'cheap' is not a finite number") &&
                        Contains("data.task = \"classification\""));
}

TEST_CASE("evaluate_regression: loss on the standardized label, mae and rmse in its units, r2 as scikit-learn's",
          "[cpu][csv]") {
  // A model that doubles its input, on 5 rows in batches of 2 (the last one short).
  nn::Linear model(1, 1);
  model.load_state_dict({{"weight", from_vector(std::vector<float>{2.0f}, {1, 1})},
                         {"bias", from_vector(std::vector<float>{0.0f}, {1})}});
  const std::vector<float> x{0.0f, 1.0f, 2.0f, -1.0f, 0.5f}, t{0.1f, 2.5f, 3.0f, -2.0f, 1.5f};
  const data::Dataset ds{from_vector(x, {5, 1}), from_vector(t, {5, 1})};
  double squares = 0, absolute = 0, mean = 0, total = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double error = 2.0 * x[i] - static_cast<double>(t[i]);
    squares += error * error;
    absolute += std::abs(error);
    mean += t[i] / 5.0;
  }
  for (const float v : t) total += (v - mean) * (v - mean);
  for (const train::SampleLoss loss : {train::SampleLoss::mse, train::SampleLoss::l1}) {
    const auto m = train::evaluate_regression(model, ds, 2, kCPU, {.mean = 10.0, .std = 4.0, .loss = loss});
    CHECK(m.at("loss") == Approx(loss == train::SampleLoss::mse ? squares / 5 : absolute / 5).epsilon(1e-6));
    CHECK(m.at("mae") == Approx(absolute / 5 * 4.0).epsilon(1e-6));
    CHECK(m.at("rmse") == Approx(std::sqrt(squares / 5) * 4.0).epsilon(1e-6));
    CHECK(m.at("r2") == Approx(1.0 - squares / total).epsilon(1e-6));
  }
}

TEST_CASE("evaluate: a classifier's confusion matrix, accuracy and macro-F1 as scikit-learn computes them",
          "[cpu][csv]") {
  // Identity weights over one-hot inputs: each row's prediction is its input's hot position.
  nn::Linear model(4, 4, /*bias=*/false);
  std::vector<float> eye(16, 0.0f);
  for (int i = 0; i < 4; ++i) eye[static_cast<size_t>(i * 5)] = 1.0f;
  model.load_state_dict({{"weight", from_vector(eye, {4, 4})}});
  const std::vector<int64_t> truth{0, 0, 1, 1, 2, 2, 2}, guess{0, 1, 1, 1, 2, 0, 2};
  std::vector<float> inputs(truth.size() * 4, 0.0f);
  for (size_t i = 0; i < guess.size(); ++i) inputs[i * 4 + static_cast<size_t>(guess[i])] = 1.0f;
  const data::Dataset ds{from_vector(inputs, {7, 4}), from_vector(truth, {7})};
  const train::ClassifierEvaluation e = train::evaluate(model, ds, 3, kCPU, 4);
  CHECK(e.confusion == std::vector<std::vector<int64_t>>{{1, 1, 0, 0}, {0, 2, 0, 0}, {1, 0, 2, 0}, {0, 0, 0, 0}});
  CHECK(e.metrics.at("accuracy") == Approx(5.0 / 7.0).epsilon(1e-12));
  // F1 of class 0: 2 x 1 / (2 predicted + 2 actual); classes 1 and 2: 4 / 5; class 3 never
  // occurs and takes no part: (0.5 + 0.8 + 0.8) / 3, what f1_score(average="macro") gives.
  CHECK(e.metrics.at("macro_f1") == Approx(0.7).epsilon(1e-12));
  CHECK_THROWS_WITH(train::evaluate(model, ds, 3, kCPU, 5), Contains("the model gives [3, 4] for 5 classes"));
}
