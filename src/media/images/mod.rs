//! Image endpoints (spec 4.6, 4.7, 8): validation of generation and edit requests (edits
//! in the SDK's multipart shape and in the native JSON shape), the default model, the
//! native shape toward its vendor, and what an answer delivered. Every check runs before
//! anything is reserved, so a request the upstream would refuse never holds quota.

mod answer;
mod edit;
mod edit_form;
mod fields;
mod generation;
mod native;

pub use answer::delivered;
pub use edit::check_edit;
pub use edit_form::{check_edit_form, FormEdit};
pub use generation::check_generation;
pub use native::{from_dashscope, to_dashscope, DASHSCOPE_EDIT_PATH};

use crate::protocol::Usage;

/// The three image model families of spec 8, by configured model names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Families {
    pub smallest: Vec<String>,
    pub middle: Vec<String>,
    pub newest: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Smallest,
    Middle,
    Newest,
}

/// What a valid image request asks for: what the reservation and per-image prices need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageJob {
    pub model: String,
    /// `None` for a model outside the configured families (generic rules only).
    pub family: Option<Family>,
    /// Images requested.
    pub n: u64,
    /// `1024x1024`, ... or `auto`.
    pub size: String,
    /// The quality asked for, or the family's default (`standard` for the smallest and
    /// middle families, `auto` for the newest); `None` for an edit, and for a model outside
    /// the families that names none.
    pub quality: Option<String>,
}

impl Families {
    /// The family that lists `model` (exact name). A name listed twice belongs to the
    /// first family in spec 8 order: smallest, middle, newest.
    pub fn family_of(&self, model: &str) -> Option<Family> {
        [Family::Smallest, Family::Middle, Family::Newest]
            .into_iter()
            .find(|f| self.models(*f).iter().any(|m| m == model))
    }

    /// The configured models of `family`, in configuration order.
    pub fn models(&self, family: Family) -> &[String] {
        match family {
            Family::Smallest => &self.smallest,
            Family::Middle => &self.middle,
            Family::Newest => &self.newest,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Delivered {
    pub images: u64,
    pub size: Option<String>,
    pub quality: Option<String>,
    pub usage: Option<Usage>,
}

#[cfg(test)]
pub(crate) mod testutil {
    use super::Families;

    /// The OpenAI models of spec 8's three families, two in the newest one.
    pub fn families() -> Families {
        Families {
            smallest: vec!["dall-e-2".into()],
            middle: vec!["dall-e-3".into()],
            newest: vec!["gpt-image-1".into(), "gpt-image-1-mini".into()],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testutil::families;
    use super::*;

    #[test]
    fn family_of_is_an_exact_match() {
        let f = families();
        assert_eq!(f.family_of("dall-e-2"), Some(Family::Smallest));
        assert_eq!(f.family_of("dall-e-3"), Some(Family::Middle));
        assert_eq!(f.family_of("gpt-image-1"), Some(Family::Newest));
        assert_eq!(f.family_of("gpt-image-1-mini"), Some(Family::Newest));
        assert_eq!(f.family_of("gpt-image"), None);
        assert_eq!(f.family_of("DALL-E-2"), None);
        assert_eq!(f.family_of(""), None);
        assert_eq!(Families::default().family_of("dall-e-2"), None);
    }

    #[test]
    fn a_name_in_two_families_belongs_to_the_first() {
        let f = Families {
            smallest: vec![],
            middle: vec!["img".into()],
            newest: vec!["img".into()],
        };
        assert_eq!(f.family_of("img"), Some(Family::Middle));
    }
}
