// catalog_text.h — the text forms the lake's catalog holds: PostgreSQL text[] literals (written
// and parsed back) and the lake table name of a source relation. Shared by the fan-in (fanin.cpp)
// and the views (views.cpp); nothing here talks to a database.
#pragma once

#include <cctype>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace trellara::cli::lake {

// A PostgreSQL text[] literal of strings (NULL elements for nullopt).
inline std::string ArrayLiteral(const std::vector<std::optional<std::string>>& items) {
  std::string out = "{";
  for (size_t i = 0; i < items.size(); i++) {
    if (i) out += ",";
    if (!items[i]) {
      out += "NULL";
      continue;
    }
    out += "\"";
    for (char c : *items[i]) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    out += "\"";
  }
  return out + "}";
}
inline std::string ArrayLiteral(const std::vector<std::string>& items) {
  std::vector<std::optional<std::string>> o(items.begin(), items.end());
  return ArrayLiteral(o);
}
// Parses a text[] as PostgreSQL prints it (quoted elements, NULL).
inline std::vector<std::optional<std::string>> ParseArray(const std::string& text) {
  std::vector<std::optional<std::string>> out;
  if (text.size() < 2) return out;
  size_t i = 1;
  while (i < text.size() - 1) {
    if (text[i] == '"') {
      std::string v;
      for (i++; i < text.size() && text[i] != '"'; i++) {
        if (text[i] == '\\') i++;
        v += text[i];
      }
      out.push_back(v);
      i++;  // closing quote
    } else {
      size_t end = text.find(',', i);
      if (end == std::string::npos) end = text.size() - 1;
      std::string v = text.substr(i, end - i);
      if (v == "NULL") out.push_back(std::nullopt);
      else out.push_back(v);
      i = end;
    }
    if (i < text.size() && text[i] == ',') i++;
  }
  return out;
}
inline std::set<std::string> ParseNameArray(const std::optional<std::string>& text) {
  std::set<std::string> out;
  if (!text) return out;
  for (const auto& v : ParseArray(*text))
    if (v) out.insert(*v);
  return out;
}

// The lake table of a source relation ("public.items" -> "public__items").
inline std::string TableNameOf(const std::string& relation) {
  std::string out = relation;
  const size_t dot = out.find('.');
  if (dot != std::string::npos) out.replace(dot, 1, "__");
  for (char& c : out)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') c = '_';
  return out;
}

}  // namespace trellara::cli::lake
