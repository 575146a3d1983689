// The peers' figures that `dslide bench` prints beside its own (bench/peers.tsv, compiled in).
#pragma once

#include <string>
#include <vector>

namespace dslide {

struct PeerFigure {
  std::string shape, key;
  double value = 0;
};

/// Every figure of bench/peers.tsv (the text compiled into the binary); throws dslide::Error
/// naming the line when one is malformed.
const std::vector<PeerFigure>& PeerFigures();
/// The figures of one shape (none for a shape nobody measured).
std::vector<PeerFigure> PeerFiguresOf(const std::string& shape);
/// Parses the TSV text: `shape<TAB>key<TAB>value<TAB>source`, '#' comments, blank lines.
std::vector<PeerFigure> ParsePeerFigures(const std::string& text, const std::string& name);

}  // namespace dslide
