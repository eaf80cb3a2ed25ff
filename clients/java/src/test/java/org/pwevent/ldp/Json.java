package org.pwevent.ldp;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A small JSON reader for the tests: objects as maps, arrays as lists, integers as Long, other
 * numbers as Double (Double.parseDouble, correctly rounded), true/false/null.
 */
final class Json {
  private final String text;
  private int at;

  private Json(String text) {
    this.text = text;
  }

  static Object parse(String text) {
    Json json = new Json(text);
    Object value = json.value();
    json.space();
    if (json.at != text.length()) {
      throw json.error("trailing text");
    }
    return value;
  }

  private IllegalArgumentException error(String what) {
    return new IllegalArgumentException(what + " at " + at);
  }

  private void space() {
    while (at < text.length() && " \t\r\n".indexOf(text.charAt(at)) >= 0) {
      at++;
    }
  }

  private Object value() {
    space();
    char c = text.charAt(at);
    switch (c) {
      case '{':
        return object();
      case '[':
        return array();
      case '"':
        return string();
      case 't':
        return literal("true", Boolean.TRUE);
      case 'f':
        return literal("false", Boolean.FALSE);
      case 'n':
        return literal("null", null);
      default:
        return number();
    }
  }

  private Object literal(String word, Object value) {
    if (!text.startsWith(word, at)) {
      throw error("bad literal");
    }
    at += word.length();
    return value;
  }

  private Map<String, Object> object() {
    Map<String, Object> out = new LinkedHashMap<>();
    at++;
    space();
    if (text.charAt(at) == '}') {
      at++;
      return out;
    }
    while (true) {
      space();
      String key = string();
      space();
      if (text.charAt(at++) != ':') {
        throw error("expected ':'");
      }
      out.put(key, value());
      space();
      char c = text.charAt(at++);
      if (c == '}') {
        return out;
      }
      if (c != ',') {
        throw error("expected ',' or '}'");
      }
    }
  }

  private List<Object> array() {
    List<Object> out = new ArrayList<>();
    at++;
    space();
    if (text.charAt(at) == ']') {
      at++;
      return out;
    }
    while (true) {
      out.add(value());
      space();
      char c = text.charAt(at++);
      if (c == ']') {
        return out;
      }
      if (c != ',') {
        throw error("expected ',' or ']'");
      }
    }
  }

  private String string() {
    if (text.charAt(at++) != '"') {
      throw error("expected a string");
    }
    StringBuilder out = new StringBuilder();
    while (true) {
      char c = text.charAt(at++);
      if (c == '"') {
        return out.toString();
      }
      if (c != '\\') {
        out.append(c);
        continue;
      }
      char e = text.charAt(at++);
      switch (e) {
        case 'n' -> out.append('\n');
        case 't' -> out.append('\t');
        case 'r' -> out.append('\r');
        case 'b' -> out.append('\b');
        case 'f' -> out.append('\f');
        case 'u' -> {
          out.append((char) Integer.parseInt(text.substring(at, at + 4), 16));
          at += 4;
        }
        default -> out.append(e);
      }
    }
  }

  private Object number() {
    int begin = at;
    while (at < text.length() && "+-0123456789.eE".indexOf(text.charAt(at)) >= 0) {
      at++;
    }
    String token = text.substring(begin, at);
    if (token.isEmpty()) {
      throw error("unexpected character");
    }
    if (token.matches("-?\\d+")) {
      return Long.parseLong(token);
    }
    return Double.parseDouble(token);
  }
}
