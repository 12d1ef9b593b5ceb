//! The PNG side of the charts: plotters' bitmap backend, with the text drawn here from the
//! embedded font instead of by plotters.
//!
//! plotters' `ab_glyph` text drawing puts each glyph at its advance without its left side bearing
//! (a "1" leaves a gap after it: "199" reads "1 99") and anchors text vertically by a rule of its
//! own. Here glyphs sit where the font puts them, the em is the SVG backend's `font-size` (the
//! style's size / 1.24) and the vertical anchors are its `dy`, so a chart's PNG and SVG agree.
use std::sync::LazyLock;

use ab_glyph::{Font, FontRef, PxScale, ScaleFont, point};
use plotters::style::text_anchor::{HPos, VPos};
use plotters_backend::{
    BackendColor, BackendCoord, BackendStyle, BackendTextStyle, DrawingBackend, DrawingErrorKind,
};

/// DejaVu Sans 2.37 (Bitstream Vera licence, in `assets/fonts/LICENSE-DejaVu.txt`).
pub(super) const FONT_FILE: &[u8] = include_bytes!("../../../../assets/fonts/DejaVuSans.ttf");

/// The embedded font, parsed once; `None` if it does not parse.
static FONT: LazyLock<Option<FontRef<'static>>> =
    LazyLock::new(|| FontRef::try_from_slice(FONT_FILE).ok());

/// plotters' bitmap backend (`DB`), which draws everything but text.
pub(super) struct Bitmap<DB>(pub DB);

#[derive(Debug)]
struct FontMissing;

impl std::fmt::Display for FontMissing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the embedded font DejaVuSans.ttf does not parse")
    }
}

impl std::error::Error for FontMissing {}

/// The em in pixels of a text style's size: plotters' SVG backend writes `font-size` as size / 1.24.
fn em(size: f64) -> f32 {
    (size / 1.24) as f32
}

/// A line of text laid out on its baseline: glyphs from x = 0 with their caret positions.
struct Line<'a> {
    font: ab_glyph::PxScaleFont<&'a FontRef<'static>>,
    glyphs: Vec<ab_glyph::Glyph>,
    width: f32,
}

impl<'a> Line<'a> {
    fn new(font: &'a FontRef<'static>, size: f64, text: &str) -> Self {
        // A PxScale is the height from descender to ascender, not the em.
        let units_per_em = font.units_per_em().unwrap_or(2048.0);
        let scale = PxScale::from(em(size) * font.height_unscaled() / units_per_em);
        let font = font.as_scaled(scale);
        let mut glyphs = Vec::new();
        let mut caret = 0.0;
        let mut previous = None;
        for c in text.chars() {
            let id = font.glyph_id(c);
            if let Some(previous) = previous {
                caret += font.kern(previous, id);
            }
            glyphs.push(id.with_scale_and_position(scale, point(caret, 0.0)));
            caret += font.h_advance(id);
            previous = Some(id);
        }
        Self {
            font,
            glyphs,
            width: caret,
        }
    }

    /// How far below the anchor the baseline goes, as the SVG backend's `dy` puts it: 0.76 em
    /// for top, half an x-height for centre, minus that for bottom.
    fn baseline(&self, size: f64, v_pos: VPos) -> f32 {
        let em = em(size);
        let font = self.font.font;
        // The top of an "x", in font units (y up; ab_glyph keeps the top in `min.y`).
        let x_height = font
            .outline(font.glyph_id('x'))
            .map(|x| x.bounds.min.y.max(x.bounds.max.y));
        let half_ex = x_height.map_or(0.27 * em, |top| {
            top / font.units_per_em().unwrap_or(2048.0) * em / 2.0
        });
        match v_pos {
            VPos::Top => 0.76 * em,
            VPos::Center => half_ex,
            VPos::Bottom => -half_ex,
        }
    }
}

impl<DB: DrawingBackend> DrawingBackend for Bitmap<DB> {
    type ErrorType = DB::ErrorType;

    fn get_size(&self) -> (u32, u32) {
        self.0.get_size()
    }

    fn ensure_prepared(&mut self) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.0.ensure_prepared()
    }

    fn present(&mut self) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.0.present()
    }

    fn draw_pixel(
        &mut self,
        point: BackendCoord,
        color: BackendColor,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.0.draw_pixel(point, color)
    }

    fn draw_line<S: BackendStyle>(
        &mut self,
        from: BackendCoord,
        to: BackendCoord,
        style: &S,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.0.draw_line(from, to, style)
    }

    fn draw_rect<S: BackendStyle>(
        &mut self,
        upper_left: BackendCoord,
        bottom_right: BackendCoord,
        style: &S,
        fill: bool,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.0.draw_rect(upper_left, bottom_right, style, fill)
    }

    fn draw_path<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        path: I,
        style: &S,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.0.draw_path(path, style)
    }

    fn draw_circle<S: BackendStyle>(
        &mut self,
        center: BackendCoord,
        radius: u32,
        style: &S,
        fill: bool,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.0.draw_circle(center, radius, style, fill)
    }

    fn fill_polygon<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        vert: I,
        style: &S,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.0.fill_polygon(vert, style)
    }

    fn blit_bitmap(
        &mut self,
        pos: BackendCoord,
        size: (u32, u32),
        src: &[u8],
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.0.blit_bitmap(pos, size, src)
    }

    fn draw_text<S: BackendTextStyle>(
        &mut self,
        text: &str,
        style: &S,
        pos: BackendCoord,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        let color = style.color();
        if color.alpha == 0.0 {
            return Ok(());
        }
        let font = FONT
            .as_ref()
            .ok_or(DrawingErrorKind::FontError(Box::new(FontMissing)))?;
        let line = Line::new(font, style.size(), text);
        let anchor = style.anchor();
        let dx = match anchor.h_pos {
            HPos::Left => 0.0,
            HPos::Center => -line.width / 2.0,
            HPos::Right => -line.width,
        };
        let dy = line.baseline(style.size(), anchor.v_pos);
        let transform = style.transform();
        let (width, height) = self.get_size();
        for glyph in &line.glyphs {
            let Some(outline) = line.font.outline_glyph(glyph.clone()) else {
                continue;
            };
            let bounds = outline.px_bounds();
            let mut coverage = Vec::new();
            outline.draw(|x, y, c| coverage.push((x, y, c)));
            for (x, y, c) in coverage {
                if c <= 0.0 {
                    continue;
                }
                let local_x = (bounds.min.x + x as f32 + dx).round() as i32;
                let local_y = (bounds.min.y + y as f32 + dy).round() as i32;
                let (x, y) = transform.transform(local_x, local_y);
                let (x, y) = (pos.0 + x, pos.1 + y);
                if x >= 0 && y >= 0 && x < width as i32 && y < height as i32 {
                    self.0.draw_pixel(
                        (x, y),
                        BackendColor {
                            alpha: color.alpha * f64::from(c.min(1.0)),
                            rgb: color.rgb,
                        },
                    )?;
                }
            }
        }
        Ok(())
    }

    fn estimate_text_size<S: BackendTextStyle>(
        &self,
        text: &str,
        style: &S,
    ) -> Result<(u32, u32), DrawingErrorKind<Self::ErrorType>> {
        let font = FONT
            .as_ref()
            .ok_or(DrawingErrorKind::FontError(Box::new(FontMissing)))?;
        let line = Line::new(font, style.size(), text);
        Ok((line.width.ceil() as u32, em(style.size()).ceil() as u32))
    }
}
