//! Colours and glyphs for the terminal the console runs on.
//!
//! Only the 16 ANSI colours are used, so a 16-colour terminal draws the same
//! screen as a true-colour one. `NO_COLOR` (any non-empty value) turns colour
//! off: emphasis then comes from bold, reverse and underline only. ASCII mode
//! (`--ascii`, or a locale that is not UTF-8) draws borders with `+-|`, chart
//! points with `*` and `+`, and [`fold_ascii`] replaces whatever box, block or
//! braille glyph a widget still drew.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::symbols;

/// How the console draws.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Theme {
    pub color: bool,
    pub ascii: bool,
}

/// A role a piece of text plays; the theme maps it to a style.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Plain,
    Dim,
    Title,
    Focus,
    Selected,
    Good,
    Warn,
    Bad,
    Series1,
    Series2,
    Phase(usize),
}

impl Default for Theme {
    fn default() -> Self {
        Theme {
            color: true,
            ascii: false,
        }
    }
}

impl Theme {
    /// From the environment: `NO_COLOR`, the locale (`LC_ALL`, `LC_CTYPE`, `LANG`) and `--ascii`.
    pub fn detect(force_ascii: bool) -> Self {
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        Theme {
            color: !no_color,
            ascii: force_ascii || !locale_is_utf8(|k| std::env::var(k).ok()),
        }
    }

    pub fn style(&self, role: Role) -> Style {
        let s = Style::default();
        if !self.color {
            return match role {
                Role::Title | Role::Bad => s.add_modifier(Modifier::BOLD),
                Role::Focus => s.add_modifier(Modifier::BOLD | Modifier::UNDERLINED),
                Role::Selected => s.add_modifier(Modifier::REVERSED),
                Role::Dim => s,
                _ => s,
            };
        }
        match role {
            Role::Plain => s,
            Role::Dim => s.fg(Color::DarkGray),
            Role::Title => s.add_modifier(Modifier::BOLD),
            Role::Focus => s.fg(Color::Cyan).add_modifier(Modifier::BOLD),
            Role::Selected => s.add_modifier(Modifier::REVERSED),
            Role::Good => s.fg(Color::Green),
            Role::Warn => s.fg(Color::Yellow),
            Role::Bad => s.fg(Color::Red).add_modifier(Modifier::BOLD),
            Role::Series1 => s.fg(Color::Cyan),
            Role::Series2 => s.fg(Color::Magenta),
            Role::Phase(i) => s.fg([
                Color::Blue,
                Color::Cyan,
                Color::Green,
                Color::Yellow,
                Color::Magenta,
                Color::Red,
            ][i % 6]),
        }
    }

    /// The marker of the n-th series of a chart: without colour, series differ by glyph.
    pub fn marker(&self, series: usize) -> symbols::Marker {
        if self.ascii {
            symbols::Marker::Custom(['*', '+', 'o', 'x'][series % 4])
        } else if !self.color && series % 2 == 1 {
            symbols::Marker::Dot
        } else {
            symbols::Marker::Braille
        }
    }

    /// What stands for the n-th series in a chart's key line.
    pub fn series_key(&self, series: usize) -> &'static str {
        if self.ascii {
            ["*", "+", "o", "x"][series % 4]
        } else if !self.color {
            ["⣿", "•"][series % 2]
        } else {
            "━━"
        }
    }

    pub fn border_set(&self) -> symbols::border::Set<'static> {
        if self.ascii {
            ASCII_BORDER
        } else {
            symbols::border::PLAIN
        }
    }

    /// The fill of the n-th stacked segment of a duration bar.
    pub fn phase_glyph(&self, phase: usize) -> &'static str {
        if self.ascii || !self.color {
            ["l", "g", "a", "w", "c", "p"][phase % 6]
        } else {
            "█"
        }
    }

    pub fn sep(&self) -> &'static str {
        if self.ascii { " | " } else { " · " }
    }

    pub fn arrow(&self) -> &'static str {
        if self.ascii { "->" } else { "→" }
    }
}

const ASCII_BORDER: symbols::border::Set<'static> = symbols::border::Set {
    top_left: "+",
    top_right: "+",
    bottom_left: "+",
    bottom_right: "+",
    vertical_left: "|",
    vertical_right: "|",
    horizontal_top: "-",
    horizontal_bottom: "-",
};

/// Whether the locale's character set is UTF-8 (`LC_ALL` wins over `LC_CTYPE` over `LANG`).
pub fn locale_is_utf8(get: impl Fn(&str) -> Option<String>) -> bool {
    for key in ["LC_ALL", "LC_CTYPE", "LANG"] {
        if let Some(v) = get(key).filter(|v| !v.is_empty()) {
            let v = v.to_ascii_lowercase();
            return v.contains("utf-8") || v.contains("utf8");
        }
    }
    false
}

/// Replaces box-drawing, block, braille and arrow glyphs in `area` by ASCII.
pub fn fold_ascii(buf: &mut Buffer, area: Rect) {
    let area = area.intersection(buf.area);
    for y in area.top()..area.bottom() {
        for x in area.left()..area.right() {
            if let Some(cell) = buf.cell_mut((x, y)) {
                let mut chars = cell.symbol().chars();
                if let (Some(c), None) = (chars.next(), chars.next())
                    && !c.is_ascii()
                    && let Some(a) = ascii_for(c)
                {
                    cell.set_char(a);
                }
            }
        }
    }
}

fn ascii_for(c: char) -> Option<char> {
    Some(match c {
        '│' | '┃' | '║' | '╎' | '┆' | '┊' => '|',
        '─' | '━' | '═' | '╌' | '┄' | '┈' => '-',
        '┌' | '┐' | '└' | '┘' | '├' | '┤' | '┬' | '┴' | '┼' | '╭' | '╮' | '╯' | '╰' | '╔' | '╗'
        | '╚' | '╝' => '+',
        '•' | '·' => '.',
        '…' => '~',
        '↑' => '^',
        '↓' => 'v',
        '←' => '<',
        '→' => '>',
        '\u{2580}'..='\u{259F}' => '#',
        '\u{2800}' => ' ',
        '\u{2801}'..='\u{28FF}' => ':',
        '\u{2500}'..='\u{257F}' => '+',
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locale_detection() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert!(locale_is_utf8(env(&[("LANG", "C.UTF-8")])));
        assert!(locale_is_utf8(env(&[
            ("LANG", "C"),
            ("LC_ALL", "en_US.utf8")
        ])));
        assert!(!locale_is_utf8(env(&[
            ("LANG", "en_US.UTF-8"),
            ("LC_ALL", "C")
        ])));
        assert!(!locale_is_utf8(env(&[("LC_CTYPE", "POSIX")])));
        assert!(!locale_is_utf8(env(&[])));
    }

    #[test]
    fn folding_leaves_only_ascii_glyphs_of_charts() {
        let mut buf = Buffer::with_lines(["┌─⣿▄│→┘", "ab é  ·"]);
        let area = buf.area;
        fold_ascii(&mut buf, area);
        assert_eq!(buf, Buffer::with_lines(["+-:#|>+", "ab é  ."]));
    }
}
