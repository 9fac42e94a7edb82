//! `#[derive(Equivalence)]` for [mpi-rsmpi](../mpi/index.html): a struct's
//! MPI datatype from its fields, as rsmpi's `mpi-derive` offers.
//!
//! Each field's datatype is its type's: an array field is that many of its
//! element's, a tuple field is a structure of its elements', and any other
//! type must itself be `Equivalence` (a number, `bool`, or a derived
//! struct). The datatype lists the fields in declaration order at their
//! offsets, and its extent is the struct's size, so slices of the struct
//! go as they lie in memory. The expansion names the face crate as `mpi`,
//! the name rsmpi programs use for it.

use proc_macro::TokenStream;
use proc_macro2::TokenStream as Tokens;
use quote::{quote, ToTokens};
use syn::{parse_macro_input, Data, DeriveInput, Fields, Index, Member, Type};

/// Implement `mpi::traits::Equivalence` for a struct.
#[proc_macro_derive(Equivalence)]
pub fn derive_equivalence(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    match expand(&input) {
        Ok(t) => t.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

fn expand(input: &DeriveInput) -> syn::Result<Tokens> {
    let Data::Struct(data) = &input.data else {
        return Err(syn::Error::new_spanned(
            &input.ident,
            "#[derive(Equivalence)] is for structs only",
        ));
    };
    let members: Vec<(Member, &Type)> = match &data.fields {
        Fields::Named(f) => f
            .named
            .iter()
            .map(|f| (Member::Named(f.ident.clone().expect("named field")), &f.ty))
            .collect(),
        Fields::Unnamed(f) => f
            .unnamed
            .iter()
            .enumerate()
            .map(|(i, f)| (Member::Unnamed(Index::from(i)), &f.ty))
            .collect(),
        Fields::Unit => Vec::new(),
    };
    let name = &input.ident;
    let (impl_g, ty_g, where_g) = input.generics.split_for_impl();
    let offsets = members
        .iter()
        .map(|(m, _)| quote!(::core::mem::offset_of!(Self, #m)));
    let types = members.iter().map(|(_, t)| datatype_of(t));
    let build = quote! {
        ::mpi::datatype::__derive::fields(
            &[#(#offsets),*],
            &[#(#types),*],
            ::core::mem::size_of::<Self>(),
        )
    };
    let type_name = name.to_string();
    // A generic struct's datatype depends on its parameters, and a static
    // in a generic function is shared by all of them: no cache there.
    let body = if input.generics.params.is_empty() {
        quote! {
            type Out = ::mpi::datatype::DatatypeRef<'static>;
            fn equivalent_datatype() -> Self::Out {
                static DATATYPE: ::std::sync::OnceLock<::mpi::datatype::__derive::Typemap> =
                    ::std::sync::OnceLock::new();
                ::mpi::datatype::__derive::cached(&DATATYPE, #type_name, || #build)
            }
        }
    } else {
        quote! {
            type Out = ::mpi::datatype::UserDatatype;
            fn equivalent_datatype() -> Self::Out {
                ::mpi::datatype::__derive::uncached(#type_name, || #build)
            }
        }
    };
    Ok(quote! {
        // SAFETY: the datatype lists exactly the fields, at their offsets,
        // each with its own type's datatype.
        unsafe impl #impl_g ::mpi::traits::Equivalence for #name #ty_g #where_g {
            #body
        }
    })
}

/// The uncommitted datatype of a field of type `ty`.
fn datatype_of(ty: &Type) -> Tokens {
    match ty {
        Type::Array(a) => {
            let elem = datatype_of(&a.elem);
            let len = &a.len;
            quote!(::mpi::datatype::__derive::array((#len) as usize, &#elem))
        }
        Type::Tuple(t) => {
            let offsets = (0..t.elems.len()).map(|i| {
                let i = Index::from(i);
                quote!(::core::mem::offset_of!(#t, #i))
            });
            let types = t.elems.iter().map(datatype_of);
            quote!(::mpi::datatype::__derive::tuple(
                &[#(#offsets),*],
                &[#(#types),*],
                ::core::mem::size_of::<#t>(),
            ))
        }
        Type::Paren(p) => datatype_of(&p.elem),
        Type::Group(g) => datatype_of(&g.elem),
        other => {
            let t = other.to_token_stream();
            quote!(::mpi::datatype::__derive::owned(
                &<#t as ::mpi::traits::Equivalence>::equivalent_datatype()
            ))
        }
    }
}
